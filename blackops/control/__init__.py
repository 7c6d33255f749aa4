"""The control plane (DurableWorkflow §1): Spaces and tokens, Workers, Versions, Deployments and
Workflow resources, their built-in handlers and the resource-backed code provider. May import
operations, workflows, ``blackops.runtime``, journal, domain; never http or cli."""
