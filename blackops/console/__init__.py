"""The web console (``/ui/``, issue 15): server-rendered pages for auditors and operators,
served by ``blackops serve`` in the same FastAPI app as the API.

It sits beside ``blackops.http`` and reads only through what the HTTP routes use: the
``Application``'s read API, the bearer-token authentication and the access rule of
``blackops.http.auth`` (``operation_of``, ``workflow_in``, ``check_space``), the checkpoint
service of ``blackops.http.audit``. A page never shows what the same token could not read
through the API; another Space's object is the same "not found" page as a missing one.

Modules: session (the cookie, CSRF), render (Jinja2, the error pages, the route class that
turns refusals into pages), views (what a page shows, built from reads), pages (the read
pages), actions (confirm and do: hold, release, redrive, terminate), app (assembly, static
files). Templates and static files are package data: nothing is fetched at run time.

May import ``blackops.http`` and everything below it in ``blackops``; never ``cli``. Nothing
but ``blackops.http.app`` (which mounts it) imports this package.
"""
