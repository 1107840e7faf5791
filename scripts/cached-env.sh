#!/usr/bin/env bash
# Make (once) a virtual environment for an interoperability tier, cached under
# ~/.cache/wxstats (WXSTATS_CACHE), and print its python; the *-env.sh scripts say
# what each tier pins and why. Usage:
#   cached-env.sh NAME IMPORT_CHECK TORCH(yes|no) PIP_REQUIREMENT...
#
# The environment is made from the base interpreter, also when this runs inside a venv,
# so that it never depends on that venv, and it does not see the interpreter's own
# packages (no --system-site-packages): what the tier's client needs is resolved for it
# alone, so a package installed next to wxstats can neither stand in for one of the
# client's nor make pip's resolver report a conflict with one.
#
# One torch for every tier that needs it (TORCH=yes), in $WXSTATS_CACHE/torch-<pin>-py<X.Y>:
# the torch of the interpreter running this where it satisfies WXSTATS_TORCH (torch==2.13.0
# unless set; scripts/test.sh installs it there), hard-linked (scripts/link-torch.py), else
# that pin installed once with pip, without its dependencies. Each such environment finds
# it through a .pth file; pip sees it there as installed
# (it satisfies the pin, so nothing is downloaded again) and adds torch's small
# dependencies to the environment itself. After the build this script checks that the
# environment imports that torch and not a copy of its own.
#
# An environment is reused while its key (the base interpreter, the requirements, the
# torch pin) is unchanged; otherwise it is rebuilt, and IMPORT_CHECK must pass at the end
# of the build. The key file is written last, so an interrupted build (or one whose check
# failed) is never taken for a finished one.
set -euo pipefail
NAME="$1" CHECK="$2" WITH_TORCH="$3"
shift 3
CACHE="${WXSTATS_CACHE:-$HOME/.cache/wxstats}"
TORCH_REQ="${WXSTATS_TORCH:-torch==2.13.0}"
ENV_DIR="$CACHE/$NAME"
BASE_PYTHON="$(python -c 'import sys; print(sys._base_executable)')"
PYVER="$("$BASE_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
mkdir -p "$CACHE"

# pip, quiet: its notes on running as root and on ignored requirements are not news
quiet_pip() {
    "$@" >&2 2> >(grep -v "is ignored\|Running pip as the 'root'" >&2)
}

key() { printf '%s\n' "$BASE_PYTHON" "$PYVER" "$@" | cksum | cut -d' ' -f1; }

if [ "$WITH_TORCH" = yes ]; then
    TORCH_DIR="$CACHE/torch-$(printf %s "$TORCH_REQ" | sed 's/^torch//; s/[^A-Za-z0-9.+-]//g')-py$PYVER"
    TORCH_KEY="$(key "$TORCH_REQ")"
    # the tiers are built at the same time (scripts/test.sh): one makes the shared torch,
    # the others wait for it here
    exec 9>"$CACHE/.torch-py$PYVER.lock"
    flock 9
    if [ "$(cat "$TORCH_DIR/.wxstats-key" 2>/dev/null)" != "$TORCH_KEY" ]; then
        rm -rf "$TORCH_DIR" "$TORCH_DIR.partial"
        # the torch of the interpreter running this (scripts/test.sh installed the pin
        # there), linked; else the pin, installed with pip
        if python "$(dirname "$0")/link-torch.py" "$TORCH_DIR.partial" "$TORCH_REQ"; then
            :
        else
            echo "scripts/cached-env.sh: installing $TORCH_REQ once into $TORCH_DIR" >&2
            rm -rf "$TORCH_DIR.partial"
            quiet_pip "$BASE_PYTHON" -m pip install -q --no-deps \
                --target "$TORCH_DIR.partial" "$TORCH_REQ"
        fi
        echo "$TORCH_KEY" >"$TORCH_DIR.partial/.wxstats-key"
        mv "$TORCH_DIR.partial" "$TORCH_DIR"
    fi
    flock -u 9
    exec 9>&-
    ENV_KEY="$(key "$@" "$TORCH_DIR" "$TORCH_KEY")"
else
    ENV_KEY="$(key "$@")"
fi

# a finished build of the same key whose python starts is reused without importing the
# client (seconds each run); remove the folder to have it built again
if [ "$(cat "$ENV_DIR/.wxstats-key" 2>/dev/null)" = "$ENV_KEY" ] &&
    "$ENV_DIR/bin/python" -c "" >/dev/null 2>&1; then
    echo "scripts/cached-env.sh: $NAME cached in $ENV_DIR" >&2
else
    echo "scripts/cached-env.sh: building $NAME (once, a minute or two) in $ENV_DIR" >&2
    rm -rf "$ENV_DIR"
    # the key file, written last, marks a finished build: an interrupted one is rebuilt
    "$BASE_PYTHON" -m venv "$ENV_DIR"
    REQS=("$@")
    if [ "$WITH_TORCH" = yes ]; then
        SITE="$("$ENV_DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
        echo "$TORCH_DIR" >"$SITE/_wxstats_shared_torch.pth"
        REQS=("$TORCH_REQ" "${REQS[@]}")
    fi
    # --no-compile: pip would compile every module of every package (minutes on two
    # cores); the check below compiles, once, those the tier's client imports
    quiet_pip "$ENV_DIR/bin/python" -m pip install -q --no-compile "${REQS[@]}"
    # files identical to another cached environment's (numpy, pandas, scipy...) become
    # hard links to them: the tiers share their common packages on disk
    "$BASE_PYTHON" "$(dirname "$0")/share-files.py" "$ENV_DIR" "$CACHE"
    # the check, writing the bytecode of what it imports (also where PYTHONDONTWRITEBYTECODE
    # is set, or every start of the client would compile it again); its output shown only
    # if it fails (fme's import prints a note)
    if ! out="$(env -u PYTHONDONTWRITEBYTECODE "$ENV_DIR/bin/python" -c "$CHECK" 2>&1)"; then
        echo "$out" >&2
        exit 1
    fi
    if [ "$WITH_TORCH" = yes ]; then
        "$ENV_DIR/bin/python" - "$TORCH_DIR" <<'EOF'
import sys
import torch

if not torch.__file__.startswith(sys.argv[1] + "/"):
    sys.exit(f"cached-env.sh: the environment has its own torch ({torch.__file__}), not the "
             f"shared one in {sys.argv[1]}: a requirement asks for another torch than the pin")
EOF
    fi
    echo "$ENV_KEY" >"$ENV_DIR/.wxstats-key"
    echo "scripts/cached-env.sh: built $NAME" >&2
fi
echo "$ENV_DIR/bin/python"
