#!/usr/bin/env bash
# Make (once) a virtual environment for an interoperability tier, cached under
# ~/.cache/wxstats (WXSTATS_CACHE), and print its python; the *-env.sh scripts say
# what each tier pins and why. Usage:
#   cached-env.sh NAME IMPORT_CHECK SYSTEM_SITE_PACKAGES(yes|no) PIP_REQUIREMENT...
# The environment is made from the base interpreter, also when this runs inside a venv,
# so that it never depends on that venv; it is rebuilt when IMPORT_CHECK fails.
set -euo pipefail
NAME="$1" CHECK="$2" SYSTEM="$3"
shift 3
ENV_DIR="${WXSTATS_CACHE:-$HOME/.cache/wxstats}/$NAME"
if "$ENV_DIR/bin/python" -c "$CHECK" >/dev/null 2>&1; then
    echo "scripts/cached-env.sh: $NAME cached in $ENV_DIR" >&2
else
    echo "scripts/cached-env.sh: building $NAME (once, a minute or two) in $ENV_DIR" >&2
    rm -rf "$ENV_DIR"
    BASE_PYTHON="$(python -c 'import sys; print(sys._base_executable)')"
    if [ "$SYSTEM" = yes ]; then
        "$BASE_PYTHON" -m venv --system-site-packages "$ENV_DIR"
    else
        "$BASE_PYTHON" -m venv "$ENV_DIR"
    fi
    "$ENV_DIR/bin/python" -m pip install -q "$@" \
        >&2 2> >(grep -v "is ignored\|Running pip as the 'root'" >&2)
    echo "scripts/cached-env.sh: built $NAME" >&2
fi
echo "$ENV_DIR/bin/python"
