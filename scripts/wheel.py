#!/usr/bin/env python3
"""Build gorun's Python wheel for one platform, with the standard library.

usage: wheel.py BINARY VERSION ARCH EPOCH OUTDIR [OTHER]   (ARCH: amd64 or arm64)

The wheel holds the gorun binary itself as a script
(gorun_launcher-VERSION.data/scripts/gorun), so that `pip install` puts it
in the environment's bin/, beside torchrun (OTHER, the build for the other
architecture, goes there too as gorun-linux-ARCH: gorun uploads it to nodes
of that architecture); there is no Python shim, so
gorun is the process that gets scancel's or Kubernetes' SIGTERM. The
distribution is gorun-launcher (the PyPI name gorun is another project's);
the command is gorun. Its tag is manylinux_2_28: scripts/release.sh checks
that the binary needs no glibc symbol newer than 2.28. Every entry carries
the commit's time (EPOCH), so one commit gives the same wheel.
"""
import base64
import hashlib
import os
import sys
import zipfile

DIST = "gorun_launcher"
PLATFORMS = {"amd64": "manylinux_2_28_x86_64", "arm64": "manylinux_2_28_aarch64"}


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main():
    binary, version, arch, epoch, outdir = sys.argv[1:6]
    other = sys.argv[6] if len(sys.argv) > 6 else None
    tag = "py3-none-" + PLATFORMS[arch]
    name = f"{DIST}-{version}-{tag}.whl"
    info = f"{DIST}-{version}.dist-info"
    with open(binary, "rb") as f:
        exe = f.read()
    with open(os.path.join(os.path.dirname(__file__), "..", "README.md"), encoding="utf-8") as f:
        readme = f.read()
    metadata = (
        "Metadata-Version: 2.1\n"
        "Name: gorun-launcher\n"
        f"Version: {version}\n"
        "Summary: gorun: torchrun, launched from one head node, checked first, supervised as one group\n"
        "Requires-Python: >=3.8\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + readme
    )
    wheel = "Wheel-Version: 1.0\nGenerator: gorun scripts/wheel.py\nRoot-Is-Purelib: false\n" f"Tag: {tag}\n"
    files = [(f"{DIST}-{version}.data/scripts/gorun", exe, 0o755)]
    if other:
        other_arch = "arm64" if arch == "amd64" else "amd64"
        with open(other, "rb") as f:
            files.append((f"{DIST}-{version}.data/scripts/gorun-linux-{other_arch}", f.read(), 0o755))
    files += [
        (f"{info}/METADATA", metadata.encode(), 0o644),
        (f"{info}/WHEEL", wheel.encode(), 0o644),
    ]
    record = "".join(f"{p},{record_hash(d)},{len(d)}\n" for p, d, _ in files) + f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode(), 0o644))
    stamp = __import__("time").gmtime(int(epoch))[:6]
    with zipfile.ZipFile(os.path.join(outdir, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data, mode in files:
            zi = zipfile.ZipInfo(path, date_time=max(stamp, (1980, 1, 1, 0, 0, 0)))
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    print("release: wrote", name)


if __name__ == "__main__":
    main()
