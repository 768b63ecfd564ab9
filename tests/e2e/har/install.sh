#!/bin/sh
# Installs har-validator (npm, pinned; the HAR 1.2 JSON schema of the
# har-schema package, the validator the `request` library used) under this
# directory's node_modules/ (gitignored) for tests/cmd/test_export.c, an
# independent reader of what `fidelity export --format har` writes. Prints
# the package's path on success. Needs npm and the registry; exits 1 with a
# message otherwise.
set -eu
VERSION=5.1.5
here=$(cd "$(dirname "$0")" && pwd)
pkg="$here/node_modules/har-validator"
if [ -f "$pkg/package.json" ] && grep -q "\"version\": \"$VERSION\"" "$pkg/package.json"; then
    echo "$pkg"; exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "install.sh: npm not found" >&2; exit 1; }
cd "$here"
[ -f package.json ] || echo '{"name":"fidelity-har-e2e","private":true}' > package.json
npm install --no-audit --no-fund --loglevel=error "har-validator@$VERSION" >&2
node -e "require('$pkg')" || { echo "install.sh: '$pkg' does not load" >&2; exit 1; }
echo "$pkg"
