"""Component ids, ``<page>-<thing>``, in one place so layouts and callbacks agree."""

URL = "app-url"
PAGE = "app-page"
TICK = "app-tick"

RUNS_TABLE = "runs-table"
RUNS_PROJECT = "runs-project"
RUNS_STATUS = "runs-status"
RUNS_COUNT = "runs-count"
RUNS_ERROR = "runs-error"
