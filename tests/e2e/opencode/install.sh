#!/bin/sh
# Installs the opencode CLI (npm package opencode-ai, pinned) under this
# directory's node_modules/ (gitignored) for the end-to-end test
# tests/record/test_opencode.c. Prints the path of the binary on success.
# Needs npm and the registry; exits 1 with a message otherwise.
set -eu
VERSION=1.18.33
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/node_modules/.bin/opencode"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$VERSION"; then
    echo "$bin"; exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "install.sh: npm not found" >&2; exit 1; }
cd "$here"
[ -f package.json ] || echo '{"name":"fidelity-opencode-e2e","private":true}' > package.json
npm install --no-audit --no-fund --loglevel=error "opencode-ai@$VERSION" >&2
"$bin" --version >/dev/null 2>&1 || { echo "install.sh: '$bin' does not run" >&2; exit 1; }
echo "$bin"
