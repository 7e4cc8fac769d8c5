#!/bin/sh
# Runs the client matrix (tests/clients) against $TERND (default
# build/ternd).  First installs the pinned npm clients with `npm ci` when
# node_modules is missing or was installed from another package-lock.json;
# if that fails the node tests fail (they say what is missing) and the
# other clients are still tested.  Extra arguments go to pytest.
cd "$(dirname "$0")" || exit 1
stamp=node_modules/.tern-package-lock.json
if ! cmp -s package-lock.json "$stamp"; then
	if npm ci --no-audit --no-fund --loglevel=error; then
		cp package-lock.json "$stamp"
	else
		echo "run.sh: npm ci failed; the node clients' tests will fail" >&2
	fi
fi
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@" .
