#!/usr/bin/env bash
# The package, as a user gets it: from a clean clone of HEAD (what is committed, nothing
# else of the working tree), `python -m build` makes the sdist and the wheel, `twine check
# --strict` checks their metadata, and both must carry LICENSE. Prints the wheel's size.
#   .ci/package.sh [OUT_DIR]     (default dist/; .ci/airflow-matrix.sh installs from there)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out="${1:-$root/dist}"
py="$root/.venv/bin/python"
work=$(mktemp -d /tmp/fte-package.XXXXXX)
trap 'rm -rf "$work"' EXIT
die() { echo "error: $*" >&2; exit 1; }

git clone --quiet --no-hardlinks "$root" "$work/src"
"$py" -m build --outdir "$work/dist" "$work/src" >"$work/build.log" 2>&1 ||
  { tail -n 30 "$work/build.log" >&2; die "python -m build failed (log above)"; }
"$py" -m twine check --strict "$work"/dist/* || die "twine check --strict failed"

version=$("$py" -c 'import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
print(next(n.value.value for n in tree.body if isinstance(n, ast.Assign)
           and getattr(n.targets[0], "id", "") == "__version__"))' "$work/src/fivetran_events/__init__.py")
wheel="$work/dist/fivetran_events-$version-py3-none-any.whl"
sdist="$work/dist/fivetran_events-$version.tar.gz"
[ -f "$wheel" ] || die "no $(basename "$wheel") (the version has one source: fivetran_events.__version__)"
[ -f "$sdist" ] || die "no $(basename "$sdist")"
"$py" - "$wheel" "$sdist" "$root/LICENSE" <<'PY' || die "LICENSE is not in both the wheel and the sdist"
import sys, tarfile, zipfile
wheel, sdist, license = sys.argv[1:]
text = open(license, "rb").read()
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert names and z.read(names[0]) == text, "wheel"
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta, "wheel metadata"
with tarfile.open(sdist) as t:
    member = next(m for m in t.getmembers() if m.name.count("/") == 1 and m.name.endswith("/LICENSE"))
    assert t.extractfile(member).read() == text, "sdist"
PY
mkdir -p "$out"
cp "$wheel" "$sdist" "$out/"
echo "==> package $version: $(basename "$wheel") $(du -k "$wheel" | cut -f1) KiB ($(stat -c %s "$wheel") bytes), $(basename "$sdist") $(du -k "$sdist" | cut -f1) KiB; twine check --strict passed, LICENSE in both"
