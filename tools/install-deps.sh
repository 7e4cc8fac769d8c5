#!/bin/sh
# Installs tern's build and test dependencies from Debian's packages when any
# is missing.  A no-op (one dpkg query) when everything is present.
# Needs root to install; otherwise it only reports what is missing.
set -e
PKGS="build-essential pkg-config libevent-dev liblmdb-dev check libinih-dev libisal-dev libsystemd-dev libssl-dev openssl faketime
scdoc man-db systemd clang libclang-rt-14-dev python3 python3-pytest python3-pymemcache python3-memcache python3-prometheus-client netcat-openbsd
libmemcached-tools memcached redis-server beanstalkd gnuplot-nox lmdb-utils procps
php-cli php-memcache php-memcached libcache-memcached-perl libcache-memcached-fast-perl
ruby ruby-dalli golang-go golang-github-bradfitz-gomemcache-dev
libssl-dev nutcracker
chromium chromium-driver python3-selenium
prometheus python3-yaml
dpkg-dev debhelper lintian fakeroot
fuse3 libfuse3-dev"
# chromium, chromium-driver and python3-selenium load the status page in a
# real browser (tests/ops/test_status_browser.py).  prometheus brings
# promtool, which tests the alert rules (Debian packages it only with the
# server; install-deps starts no service); python3-yaml reads the rules.
# dpkg-dev, debhelper, lintian and fakeroot build and check the Debian
# package (tests/package).
# fuse3 and libfuse3-dev build and mount pcfs, the file system the power-cut
# tests cut the power of (tests/powercut).
# The client matrix's node clients come from npm (tests/clients/run.sh).  A
# node that is already installed (for example a vendor's package that
# bundles npm and conflicts with Debian's npm) is kept as it is.
command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm"
missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "install-deps: missing Debian packages:$missing (run as root to install)" >&2
	exit 1
fi
echo "install-deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# Distro services must not start on install: tests start their own on free ports.
made_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
	chmod +x /usr/sbin/policy-rc.d
	made_policy=1
fi
apt-get update -qq >/dev/null || apt-get update
apt-get install -y -qq --no-install-recommends $missing >/dev/null
[ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
exit 0
