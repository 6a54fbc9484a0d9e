"""Programs the tests run in another process (``tests.helpers.program(NAME, *args)``):
real files, so they are linted and their tracebacks name a line."""
