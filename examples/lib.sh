# Shared by the example scripts (sourced, not run): where fidelity is,
# where outputs go, and starting and stopping servers on free ports.
#   FIDELITY  the binary (default: ./fidelity of this clone when built,
#             else fidelity on PATH); its folder is put first on PATH so
#             that bisect's server command finds it too
#   OUT       the folder every output goes to (default ./example-out)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${FIDELITY:-}" ]; then
    if [ -x "$here/../fidelity" ]; then FIDELITY=$here/../fidelity
    else FIDELITY=$(command -v fidelity || true); fi
fi
[ -n "$FIDELITY" ] && [ -x "$FIDELITY" ] || {
    echo "$(basename "$0"): no fidelity binary: run 'make' first, or set FIDELITY" >&2
    exit 2
}
FIDELITY=$(cd "$(dirname "$FIDELITY")" && pwd)/$(basename "$FIDELITY")
PATH=$(dirname "$FIDELITY"):$PATH
export FIDELITY PATH
OUT=${OUT:-$PWD/example-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# serve NAME CMD [ARGS...]: starts `fidelity CMD --listen 127.0.0.1:0
# ARGS` (sim or record), waits for its "listening on" line, sets $url
serve() {
    name=$1
    shift
    cmd=$1
    shift
    : >"$OUT/$name.log"
    "$FIDELITY" "$cmd" --listen 127.0.0.1:0 "$@" >"$OUT/$name.log" 2>&1 &
    pids="$pids $!"
    eval "pid_$name=$!"
    url=""
    for _ in $(seq 100); do
        url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$OUT/$name.log" || true)
        [ -n "$url" ] && break
        sleep 0.1
    done
    [ -n "$url" ] || { echo "$(basename "$0"): '$name' did not start:" >&2; cat "$OUT/$name.log" >&2; exit 1; }
}

# stop NAME: stops a server started by serve, waiting for its clean stop
stop() {
    eval "p=\$pid_$1"
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}

# run EXPECTED... -- COMMAND...: runs a command; its exit code must be
# one of EXPECTED (a demo of a faulty server expects 1)
run() {
    ok=""
    while [ "$1" != "--" ]; do ok="$ok $1"; shift; done
    shift
    code=0
    "$@" || code=$?
    case " $ok " in
    *" $code "*) ;;
    *) echo "$(basename "$0"): '$*' exited $code; expected$ok" >&2; exit 1 ;;
    esac
}
