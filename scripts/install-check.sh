#!/bin/sh
# make install into a temporary DESTDIR with another PREFIX and SYSCONFDIR,
# then check what landed: the binary (it runs, and names this checkout's
# commit), the example configuration (it validates), the unit (its paths
# follow PREFIX and SYSCONFDIR), and that a second install keeps an
# operator's configuration. No root needed; nothing outside the temporary
# folder is touched. `make install-check`; cmd/xlb's TestInstall runs it.
set -eu
cd "$(dirname "$0")/.."
dest=$(mktemp -d "${TMPDIR:-/tmp}/xlb-install-check.XXXXXX")
trap 'rm -rf "$dest"' EXIT
prefix=/opt/xlb-check sysconf=/etc/xlb-check
fail() { echo "install-check: $*" >&2; exit 1; }

make --no-print-directory -s install DESTDIR="$dest" PREFIX="$prefix" SYSCONFDIR="$sysconf" >/dev/null
bin="$dest$prefix/bin/xlb"
cfg="$dest$sysconf/xlb/xlb.toml"
unit="$dest$prefix/lib/systemd/system/xlb.service"
[ -x "$bin" ] || fail "no executable $bin"
[ -f "$cfg" ] || fail "no $cfg"
[ -f "$unit" ] || fail "no $unit"
[ "$(stat -c %a "$unit")" = 644 ] || fail "$unit: mode $(stat -c %a "$unit"), want 644"
"$bin" check -c "$cfg" >/dev/null || fail "the installed example does not validate"
version=$("$bin" version)
if head=$(git rev-parse HEAD 2>/dev/null); then
	echo "$version" | grep -q "^commit $head" || fail "xlb version: $version; want commit $head"
fi
grep -q "^ExecStart=$prefix/bin/xlb run -c $sysconf/xlb/xlb.toml" "$unit" || fail "ExecStart does not use PREFIX and SYSCONFDIR: $(grep ^ExecStart= "$unit")"
grep -q "^ExecReload=$prefix/bin/xlb reload -c $sysconf/xlb/xlb.toml --pid \$MAINPID" "$unit" || fail "ExecReload: $(grep ^ExecReload= "$unit")"
if grep -q '/usr/local/bin\|/etc/xlb/' "$unit"; then fail "$unit still names the default paths"; fi

# A second install keeps the operator's file.
echo "# mine" >> "$cfg"
make --no-print-directory -s install DESTDIR="$dest" PREFIX="$prefix" SYSCONFDIR="$sysconf" >/dev/null
tail -n 1 "$cfg" | grep -q '^# mine$' || fail "a second install overwrote $cfg"
[ -f "$cfg.example" ] || fail "a second install left no $cfg.example"
echo "install-check: ok: $(echo "$version" | tr "\n" " ")"
