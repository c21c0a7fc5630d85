"""The MCP server: tools an agent calls to read runs and alerts and to stop or checkpoint a run.

``server`` defines the tools once; ``rest`` is their one way to the data (the REST API with the
caller's token); ``answers`` shapes every answer. ``cli`` serves them over stdio (``rlguard
mcp``), ``mount`` over streamable HTTP at ``/mcp`` on the service.
"""
