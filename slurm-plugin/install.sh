#!/usr/bin/env bash
# Builds the job_submit/hadar plugin against the installed Slurm headers, checks that it
# matches the running Slurm exactly, installs it into Slurm's PluginDir and prints the
# slurm.conf line to add. With --uninstall, removes it again. See slurm-plugin/README.md.
#
#   slurm-plugin/install.sh [--plugin-dir DIR] [--no-build] [--from FILE] [--force]
#   slurm-plugin/install.sh --uninstall [--plugin-dir DIR] [--force]
#
# --plugin-dir DIR  install into DIR instead of the first folder of Slurm's PluginDir
# --no-build        install the already built target/release/libjob_submit_hadar.so
# --from FILE       install FILE, a library built earlier (implies --no-build)
# --force           uninstall even though slurmctld still lists the plugin
#
# Environment: SLURM_CONF (the slurm.conf Slurm's commands read), SLURM_INCLUDE_DIR (where
# slurm/slurm.h is; default /usr/include), CARGO (the cargo to build with), CARGO_TARGET_DIR
# (where cargo builds, as for cargo itself; relative to the repository; default target).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
include_dir="${SLURM_INCLUDE_DIR:-/usr/include}"
plugin_dir=""
build=1
uninstall=0
force=0
from=""

die() { echo "install.sh: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --plugin-dir) [ $# -ge 2 ] || die "--plugin-dir needs a folder"; plugin_dir="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    --from) [ $# -ge 2 ] || die "--from needs a file"; from="$2"; build=0; shift 2 ;;
    --uninstall) uninstall=1; shift ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

# The running controller's configuration, if one answers (empty otherwise).
running_config="$(scontrol show config 2>/dev/null || true)"
config_value() { awk -F' = ' -v k="$1" '$1 ~ "^"k" *$" { print $2; exit }' <<<"$running_config"; }

if [ -z "$plugin_dir" ]; then
  plugin_dir="$(config_value PluginDir)"
  if [ -z "$plugin_dir" ] && [ -n "${SLURM_CONF:-}" ] && [ -r "$SLURM_CONF" ]; then
    plugin_dir="$(awk -F= 'tolower($1) ~ /^ *plugindir *$/ { print $2; exit }' "$SLURM_CONF" | tr -d ' ')"
  fi
  if [ -z "$plugin_dir" ]; then
    multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
    plugin_dir="/usr/lib/$multiarch/slurm-wlm"
  fi
  plugin_dir="${plugin_dir%%:*}"   # PluginDir may list several folders; use the first
fi
target="$plugin_dir/job_submit_hadar.so"

if [ "$uninstall" = 1 ]; then
  plugins="$(config_value JobSubmitPlugins)"
  if [[ ",$plugins," == *",hadar,"* || ",$plugins," == *",job_submit/hadar,"* ]] && [ "$force" = 0 ]; then
    die "slurmctld still lists hadar in JobSubmitPlugins ($plugins): remove it from slurm.conf and run 'scontrol reconfigure' first (or pass --force); a listed plugin that cannot load makes every submission fail"
  fi
  if [ -e "$target" ]; then
    rm -f -- "$target"
    echo "install.sh: removed $target"
  else
    echo "install.sh: $target is not installed"
  fi
  exit 0
fi

[ -r "$include_dir/slurm/slurm_version.h" ] || die "$include_dir/slurm/slurm_version.h not found: install Slurm's headers (Debian: apt-get install libslurm-dev) or set SLURM_INCLUDE_DIR"
header_version="$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$include_dir/slurm/slurm_version.h")"
header_version=$((header_version))

# The version of the Slurm that will load the plugin: the running controller's if one
# answers, else the installed slurmctld's.
running_version="$(config_value SLURM_VERSION)"
source_of_version="the running slurmctld"
if [ -z "$running_version" ]; then
  running_version="$( (slurmctld -V 2>/dev/null || true) | awk '{ print $2 }')"
  source_of_version="the installed slurmctld"
fi
[ -n "$running_version" ] || die "cannot tell which Slurm will load the plugin: no slurmctld answers and none is installed"
IFS=. read -r major minor micro <<<"${running_version%%-*}"
running_number=$(( (10#$major << 16) + (10#$minor << 8) + 10#${micro:-0} ))
if [ "$header_version" != "$running_number" ]; then
  die "$(printf 'headers in %s are Slurm 0x%06x but %s is %s (0x%06x): Slurm loads a plugin only if the versions match exactly; install the matching libslurm-dev and rebuild' \
    "$include_dir" "$header_version" "$source_of_version" "$running_version" "$running_number")"
fi

if [ "$build" = 1 ]; then
  (cd "$repo" && SLURM_INCLUDE_DIR="$include_dir" "${CARGO:-cargo}" build --release --locked -p hadar-slurm-plugin) \
    || die "build failed"
fi
target_dir="${CARGO_TARGET_DIR:-target}"
[[ "$target_dir" = /* ]] || target_dir="$repo/$target_dir"
built="${from:-$target_dir/release/libjob_submit_hadar.so}"
[ -f "$built" ] || die "$built not found (build it first, or drop --no-build)"
# The release the library was built for (a marker string build.rs puts in it): Slurm refuses
# to load a plugin of another release, and then every submission fails.
built_for="$(grep -aoE 'hadar-built-for-slurm=0x[0-9a-fA-F]+' "$built" | head -n 1 | cut -d= -f2 || true)"
[ -n "$built_for" ] || die "$built carries no Slurm release marker: rebuild it with this repository (drop --no-build)"
if [ "$((built_for))" != "$running_number" ]; then
  die "$(printf '%s was built for Slurm %d.%02d.%d (0x%06x) but %s is %s (0x%06x): rebuild it against this release'"'"'s headers (drop --no-build, set SLURM_INCLUDE_DIR)' \
    "$built" $((built_for >> 16)) $(((built_for >> 8) & 255)) $((built_for & 255)) "$((built_for))" "$source_of_version" "$running_version" "$running_number")"
fi

# `install` writes a new file and renames it into place: a running slurmctld keeps its
# mapping of the old file, whereas cp would overwrite the mapped pages under it.
install -d "$plugin_dir"
install -m 0755 "$built" "$target"
echo "install.sh: installed $target (Slurm $running_version)"
cat <<EOF

Add to slurm.conf (append to an existing JobSubmitPlugins= list, e.g. JobSubmitPlugins=lua,hadar):

    JobSubmitPlugins=hadar

Put the Hadar configuration at /etc/hadar/hadar.toml, where hadar serve reads it too (start
from $repo/etc/hadar.toml; check it with 'hadar check-config'), or point slurmctld's
environment variable HADAR_CONFIG at it. Then run:

    scontrol reconfigure

and check that 'scontrol show config | grep JobSubmitPlugins' lists hadar.
Rebuild and reinstall after every Slurm upgrade, patch releases included.
EOF
