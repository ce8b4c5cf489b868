#!/bin/sh
# One-shot job of docker-compose.temporal.yml (temporalio/admin-tools image, which has the
# `temporal` CLI): wait for the server, create the namespace, register the search attributes
# that hitl runs keep current. Idempotent: safe on every `up`, and against any self-hosted
# cluster you administer (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE); on Temporal Cloud use `tcld`.
#
# The attributes must match hitl/wire.py SEARCH_ATTRIBUTES (tests/unit/test_deploy.py checks,
# tests/e2e/test_production.py runs this script against the dev server).
set -eu

: "${TEMPORAL_ADDRESS:=temporal:7233}"
: "${TEMPORAL_NAMESPACE:=default}"
: "${HITL_NAMESPACE_RETENTION:=30d}"
: "${HITL_SETUP_ATTEMPTS:=60}"
export TEMPORAL_ADDRESS

# retry CMD...: the frontend answers before the namespace registry has caught up.
retry() {
    n=0
    until out=$("$@" 2>&1); do
        case "$out" in
        *"different type"*)
            echo "$out" >&2
            exit 1
            ;;
        esac
        n=$((n + 1))
        if [ "$n" -ge "$HITL_SETUP_ATTEMPTS" ]; then
            echo "failed after $n attempts: $*" >&2
            echo "$out" >&2
            exit 1
        fi
        sleep 2
    done
}

echo "waiting for Temporal at $TEMPORAL_ADDRESS"
retry temporal operator cluster health

if temporal operator namespace describe -n "$TEMPORAL_NAMESPACE" >/dev/null 2>&1; then
    echo "namespace $TEMPORAL_NAMESPACE exists"
else
    echo "creating namespace $TEMPORAL_NAMESPACE (retention $HITL_NAMESPACE_RETENTION)"
    retry temporal operator namespace create -n "$TEMPORAL_NAMESPACE" \
        --retention "$HITL_NAMESPACE_RETENTION"
fi

# register NAME TYPE: `create` succeeds when the attribute exists with this type and fails
# at once when it exists with another.
register() {
    retry temporal operator search-attribute create -n "$TEMPORAL_NAMESPACE" \
        --name "$1" --type "$2"
    echo "search attribute $1 ($2) registered"
}

register HitlStatus Keyword
register HitlPendingTools KeywordList
register HitlAgent Keyword
register HitlPendingSince Datetime
register HitlDeadline Datetime
register HitlOutcomes KeywordList

echo "namespace $TEMPORAL_NAMESPACE is ready for hitl"
