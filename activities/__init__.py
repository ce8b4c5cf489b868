"""Activities: model calls, tool planning and execution, graph capture. User code runs here."""
