"""A `docker save` archive rewritten as an OCI image layout archive, and the digest a registry serves it under.

scripts/build-image writes the legacy `docker save` format (no manifest digest: the engine has no registry to
push to). ``convert`` writes the same image (the same config, the same layers, gzip-compressed) as an OCI image
layout in a tar, whose one manifest's digest is what a registry keeps when the archive is copied as is
(`skopeo copy --preserve-digests oci-archive:...`, `crane push`) and what containerd keeps on `ctr images
import`: the digest scripts/release pins in the packaged chart. The output is reproducible: the same input
gives the same bytes (fixed tar metadata, gzip without a timestamp).

    python -m harness.oci DOCKER_ARCHIVE OUT.oci.tar REFERENCE    prints the manifest's digest
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int
    path: Path

    def descriptor(self, media_type: str) -> dict[str, Any]:
        return {"mediaType": media_type, "digest": self.digest, "size": self.size}


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _write_blob(folder: Path, data: bytes) -> Blob:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = folder / digest.split(":")[1]
    path.write_bytes(data)
    return Blob(digest, len(data), path)


class _Hashing(io.RawIOBase):
    """A writable file that hashes and counts what passes through it to ``target``."""

    def __init__(self, target: IO[bytes]) -> None:
        self.target, self.sha, self.size = target, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.sha.update(chunk)
        self.size += len(chunk)
        self.target.write(chunk)
        return len(chunk)


def _gzip_layer(source: IO[bytes], folder: Path) -> tuple[Blob, str]:
    """The layer gzip-compressed into ``folder`` (its blob), and the uncompressed digest (its diff_id)."""
    uncompressed = hashlib.sha256()
    scratch = folder / "layer.partial"
    with scratch.open("wb") as out:
        hashing = _Hashing(out)
        # mtime=0 and no file name: the same layer always compresses to the same bytes.
        with gzip.GzipFile(filename="", mode="wb", fileobj=hashing, mtime=0, compresslevel=6) as gz:
            while chunk := source.read(_CHUNK):
                uncompressed.update(chunk)
                gz.write(chunk)
    digest = "sha256:" + hashing.sha.hexdigest()
    path = folder / digest.split(":")[1]
    scratch.rename(path)
    return Blob(digest, hashing.size, path), "sha256:" + uncompressed.hexdigest()


def _tar_add(tar: tarfile.TarFile, name: str, path: Path | None = None, data: bytes | None = None) -> None:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if path is None and data is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
        return
    info.mode = 0o644
    if data is not None:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        return
    assert path is not None
    info.size = path.stat().st_size
    with path.open("rb") as f:
        tar.addfile(info, f)


def convert(docker_archive: Path, out: Path, reference: str) -> str:
    """Writes ``docker_archive``'s one image to ``out`` as an OCI image layout archive named ``reference``
    (``registry/repository:tag``); returns the manifest's digest (``sha256:<hex>``)."""
    with tempfile.TemporaryDirectory(prefix="dispatch-k8s-oci-") as tmp:
        blobs = Path(tmp)
        with tarfile.open(docker_archive) as src:
            (image,) = json.loads(_read(src, "manifest.json"))  # one image: scripts/build-image saves one tag
            config_bytes = _read(src, image["Config"])
            diff_ids = json.loads(config_bytes)["rootfs"]["diff_ids"]
            if len(diff_ids) != len(image["Layers"]):
                raise ValueError(f"{docker_archive}: {len(image['Layers'])} layers, its config {len(diff_ids)}")
            layers = []
            for name, want in zip(image["Layers"], diff_ids, strict=True):
                member = src.extractfile(name)
                if member is None:
                    raise ValueError(f"{docker_archive}: no layer {name}")
                blob, diff_id = _gzip_layer(member, blobs)
                if diff_id != want:
                    raise ValueError(f"{docker_archive}: layer {name} is {diff_id}, the config says {want}")
                layers.append(blob)
        config = _write_blob(blobs, config_bytes)
        manifest = _write_blob(
            blobs,
            _json_bytes(
                {
                    "schemaVersion": 2,
                    "mediaType": MANIFEST_TYPE,
                    "config": config.descriptor(CONFIG_TYPE),
                    "layers": [layer.descriptor(LAYER_TYPE) for layer in layers],
                }
            ),
        )
        tag = reference.rsplit(":", 1)[1] if ":" in reference.rsplit("/", 1)[-1] else "latest"
        index = {
            "schemaVersion": 2,
            "mediaType": INDEX_TYPE,
            "manifests": [
                {
                    **manifest.descriptor(MANIFEST_TYPE),
                    # skopeo and crane read the tag; containerd's `ctr images import` the whole name.
                    "annotations": {"org.opencontainers.image.ref.name": tag, "io.containerd.image.name": reference},
                }
            ],
        }
        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            _tar_add(tar, "oci-layout", data=_json_bytes({"imageLayoutVersion": "1.0.0"}))
            _tar_add(tar, "index.json", data=_json_bytes(index))
            _tar_add(tar, "blobs")
            _tar_add(tar, "blobs/sha256")
            for blob in sorted({config, manifest, *layers}, key=lambda b: b.digest):
                _tar_add(tar, f"blobs/sha256/{blob.digest.split(':')[1]}", path=blob.path)
        shutil.move(partial, out)
        return manifest.digest


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.extractfile(name)
    if member is None:
        raise ValueError(f"{tar.name}: no file {name}")
    return member.read()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    print(convert(Path(argv[0]), Path(argv[1]), argv[2]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
