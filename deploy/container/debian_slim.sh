#!/usr/bin/env bash
# Builds a Debian stable-slim root file system as a tar, the base of the stand-in for the official
# Deno image when no registry is reachable (deploy/container/build.ts runs it, as root):
#   deploy/container/debian_slim.sh <suite> <mirror> <out.tar>
#
# Laid out as Debian's own `debian:<suite>-slim` image is (debuerreotype's steps, in our words):
# debootstrap's minbase variant, the security and updates suites applied, the container's apt and
# dpkg settings (no services started by installs, no package caches, compressed indexes, no
# translations), and the slim variant's cut (documentation, manual pages, info pages and locales
# removed, and kept out of later installs by /etc/dpkg/dpkg.cfg.d/docker); no machine identity,
# host name, resolver or logs of the build. One package more than the official base: `tini`,
# which the official Deno image copies in from its GitHub release instead.
set -euo pipefail
suite=$1
mirror=$2
out=$3

rootfs=$(mktemp -d)
chmod 0755 "$rootfs"
cleanup() {
  umount "$rootfs/proc" 2>/dev/null || true
  rm -rf "$rootfs"
}
trap cleanup EXIT

debootstrap --variant=minbase --include=tini "$suite" "$rootfs" "$mirror" >&2
codename=$(. "$rootfs/etc/os-release" && echo "$VERSION_CODENAME")
keyring=$(cd "$rootfs" && ls usr/share/keyrings/debian-archive-keyring.{pgp,gpg} 2>/dev/null | head -n 1)

# The sources Debian's image ships (deb822): the release, its updates and its security suite.
rm -f "$rootfs/etc/apt/sources.list"
cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: ${mirror}
Suites: ${codename} ${codename}-updates
Components: main
Signed-By: /${keyring}

Types: deb
URIs: ${mirror}-security
Suites: ${codename}-security
Components: main
Signed-By: /${keyring}
EOF

# Installs in a container start no services, keep no package caches, keep indexes compressed and
# fetch no translations.
printf '#!/bin/sh\n# Installs in a container start no services.\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
echo 'force-unsafe-io' >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
clean='"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true";'
cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<EOF
DPkg::Post-Invoke { ${clean} };
APT::Update::Post-Invoke { ${clean} };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
echo 'Acquire::GzipIndexes "true";' >"$rootfs/etc/apt/apt.conf.d/docker-gzip-indexes"
echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
echo 'Apt::AutoRemove::SuggestsImportant "false";' \
  >"$rootfs/etc/apt/apt.conf.d/docker-autoremove-suggests"

# The security and updates suites, as the official image carries them at its build.
mount -t proc proc "$rootfs/proc"
chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive apt-get full-upgrade -yqq >&2
chroot "$rootfs" apt-get clean
umount "$rootfs/proc"

# The slim variant: what a container never reads, removed now and excluded from later installs.
{
  echo '# The "slim" variant: files a container does not need are excluded from installs.'
  for path in /usr/share/doc/ /usr/share/info/ /usr/share/linda/ /usr/share/lintian/overrides/ \
    /usr/share/locale/ /usr/share/man/ /usr/share/gnome/help/ /usr/share/omf/; do
    echo "path-exclude ${path}*"
  done
  echo 'path-include /usr/share/doc/*/copyright'
  echo 'path-include /usr/share/locale/locale.alias'
} >"$rootfs/etc/dpkg/dpkg.cfg.d/docker"
find "$rootfs/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
find "$rootfs/usr/share/locale" -mindepth 1 -not -type d -not -name locale.alias -delete
rm -rf "$rootfs"/usr/share/{info,man,linda,omf,gnome/help}/* "$rootfs"/usr/share/lintian/overrides/*
find "$rootfs/usr/share/doc" "$rootfs/usr/share/locale" -mindepth 1 -depth -type d -empty -delete

# Nothing of the machine that built it: identity, host name, resolver, logs, indexes, caches.
: >"$rootfs/etc/machine-id"
rm -f "$rootfs/etc/hostname" "$rootfs/etc/resolv.conf" "$rootfs"/var/log/{dpkg,bootstrap,alternatives}.log \
  "$rootfs"/var/log/apt/*.log "$rootfs/var/cache/ldconfig/aux-cache"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
mkdir -p "$rootfs/var/lib/apt/lists/partial"

tar --numeric-owner --xattrs --acls -C "$rootfs" -cf "$out" .
