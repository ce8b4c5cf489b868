#!/bin/sh
# One-shot job of docker-compose.temporal.yml (temporalio/admin-tools image): create Temporal's
# two PostgreSQL databases and bring their schemas to the version this image ships. Idempotent,
# so it runs on every `up`; after bumping the image tags it is also the schema migration.
set -eu

: "${POSTGRES_SEEDS:=postgresql}"
: "${DB_PORT:=5432}"
: "${POSTGRES_USER:=temporal}"
: "${POSTGRES_PWD:?POSTGRES_PWD must be set}"
: "${DBNAME:=temporal}"
: "${VISIBILITY_DBNAME:=temporal_visibility}"
SCHEMA=/etc/temporal/schema/postgresql/v12
export SQL_PASSWORD="$POSTGRES_PWD"

sql_tool() {
    temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$DB_PORT" \
        -u "$POSTGRES_USER" "$@"
}

# setup DATABASE SCHEMA_DIR
setup() {
    if out=$(sql_tool --db "$1" create 2>&1); then
        echo "created database $1"
    else
        case "$out" in
        *"already exists"*) echo "database $1 exists" ;;
        *)
            echo "$out" >&2
            exit 1
            ;;
        esac
    fi
    sql_tool --db "$1" setup-schema -v 0.0
    sql_tool --db "$1" update-schema -d "$2"
}

setup "$DBNAME" "$SCHEMA/temporal/versioned"
setup "$VISIBILITY_DBNAME" "$SCHEMA/visibility/versioned"
echo "Temporal schemas are up to date"
