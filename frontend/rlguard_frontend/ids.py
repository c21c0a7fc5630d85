"""Component ids, ``<page>-<thing>``, in one place so layouts and callbacks agree.

Pattern-matching ids are dicts ``{"type": <TYPE>, "panel": <panel id>}``.
"""

URL = "app-url"
PAGE = "app-page"
PAGE_SHOWN = "app-page-shown"
TICK = "app-tick"
THEME = "app-theme"
THEME_TOGGLE = "app-theme-toggle"
SIGN_OUT = "app-sign-out"

RUNS_TABLE = "runs-table"
RUNS_PROJECT = "runs-project"
RUNS_TAG = "runs-tag"
RUNS_STATUS = "runs-status"
RUNS_COUNT = "runs-count"
RUNS_ERROR = "runs-error"
RUNS_COMPARE = "runs-compare"

RUN_ID = "run-id"
RUN_HEADER = "run-header"
RUN_LAST_STEP = "run-last-step"
RUN_STATUS = "run-status"
RUN_ERROR = "run-error"
RUN_PLAN = "run-plan"
RUN_CURSOR = "run-cursor"
RUN_ZOOM = "run-zoom"
RUN_ALERTS = "run-alerts"
RUN_PANELS = "run-panels"
RUN_KEYS_GRID = "run-keys-grid"
RUN_KEY_SEARCH = "run-key-search"
RUN_TIMELINE = "run-timeline"
RUN_ALERT_DETAIL = "run-alert-detail"
RUN_ZOOM_RESET = "run-zoom-reset"
RUN_ZOOM_LABEL = "run-zoom-label"

# pattern-matching types
PANEL_GRAPH = "run-panel-graph"
PANEL_CARD = "run-panel-card"
ALERT_ITEM = "run-alert-item"
ALERT_ACTION = "run-alert-action"

MINI_CARD = "run-mini-card"
MINI_BODY = "run-mini-body"
RUN_MINIS_ALL = "run-minis-all"
RUN_REDRAW = "run-redraw"
RUN_LIVE = "run-live"

# controls bar: ids are f"{page prefix}-{name}" (controls.control_id)
SMOOTHING = "smoothing"
LOG = "log"
XAXIS = "xaxis"
LIVE = "live"

COMPARE_RUNS = "compare-runs"
COMPARE_GRID = "compare-grid"
COMPARE_ERROR = "compare-error"
COMPARE_LEGEND = "compare-legend"
