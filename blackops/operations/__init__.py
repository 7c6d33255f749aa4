"""Operations (the operation-lifecycle spec): handlers, Inline and Deferred attempts, results,
Outcome Records, retention. May import ``blackops.runtime``, ``blackops.ids``, journal, domain."""
