"""Signed releases: Ed25519 keys (the cryptography package: the ``sign`` extra), the
signature of a manifest's bytes, and verify's check of it (:func:`check_signature`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path
from typing import Any, Mapping

from anonflow.api import InputError

from .findings import Findings, short
from .manifest import MANIFEST, SIGNATURE, integrity, manifest_bytes, not_regular, open_regular, relative_inside


SIGN_EXTRA = "the cryptography package is not installed: pip install 'anonflow[sign]'"


def crypto() -> tuple[Any, Any]:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise InputError(f"signed releases need Ed25519 signatures, but {SIGN_EXTRA}") from None
    return ed25519, serialization


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} {path} not found") from None
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


def _read_private_key_file(path: Path) -> tuple[bytes, int]:
    """A private key file's bytes and mode (read through one descriptor)."""
    try:
        fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise InputError(f"signing key {path} not found") from None
    except OSError as exc:
        raise InputError(f"signing key {path} cannot be read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(), stat.S_IMODE(os.fstat(fh.fileno()).st_mode)


def load_private_key(path: Path) -> Any:
    """An Ed25519 private key from a PEM file (as ``anonflow keygen`` writes it, mode 0600).
    Refused, as ssh refuses an unprotected key, when the file's mode lets the group or others
    read or write it: whoever can read it can sign releases as its owner."""
    ed25519, serialization = crypto()
    data, mode = _read_private_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise InputError(f"signing key {path} is encrypted; give an unencrypted Ed25519 key "
                         "(anonflow keygen writes one)") from None
    except Exception:
        raise InputError(f"signing key {path} is not a PEM private key (anonflow keygen writes one)") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InputError(f"signing key {path} is not an Ed25519 key (anonflow keygen writes one)")
    if mode & 0o077:
        raise InputError(f"signing key {path} is open to others (mode {mode:04o}: its group or others may read or "
                         f"write it), so anyone who reads it can sign as you; not used: make it yours alone with "
                         f"chmod 600 {path}")
    return key


def signing_key(workflow_dir: Path, sign: str) -> Any:
    """The release publisher's ``sign`` key: ``sign`` resolved against the workflow's folder,
    which it must stay inside (symbolic links resolved), loaded and checked as an Ed25519
    private key; every problem is one ``release: ...`` InputError line."""
    rel = relative_inside(sign)
    base = Path(os.path.realpath(workflow_dir))
    if rel is None:
        raise InputError(f"release: 'sign' must be a key file inside the workflow's folder, given relative to it "
                         f"(no absolute path, no '..'), got {sign!r}")
    path = Path(os.path.realpath(base / rel))
    if path != base and base not in path.parents:
        raise InputError(f"release: 'sign' {sign!r} leads out of the workflow's folder {base} (through a symbolic "
                         f"link, to {path}); keep the key file inside it")
    why = not_regular(path)
    if why is not None and why != "does not exist":
        raise InputError(f"release: signing key {path} {why}")
    try:
        return load_private_key(path)
    except InputError as exc:
        raise InputError(f"release: {exc.message}") from None


def load_public_key(path: Path) -> Any:
    """An Ed25519 public key from a PEM file (``KEY.pub`` of ``anonflow keygen KEY``)."""
    ed25519, serialization = crypto()
    data = _read_key_file(path, "public key")
    if b"PRIVATE KEY-----" in data:
        raise InputError(f"public key {path} is a private key; give its .pub file (anonflow keygen KEY writes "
                         "KEY.pub): checking a signature needs only the public key")
    try:
        key = serialization.load_pem_public_key(data)
    except Exception:
        raise InputError(f"public key {path} is not a PEM public key (give the .pub file anonflow keygen "
                         "wrote)") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise InputError(f"public key {path} is not an Ed25519 key")
    return key


def key_fingerprint(public_key: Any) -> str:
    """sha256 of the raw 32-byte Ed25519 public key, hex."""
    _, serialization = crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def keygen(path: Path) -> tuple[Path, str]:
    """Write a new Ed25519 key pair: ``path`` (private key, PEM PKCS#8, mode 0600) and
    ``path.pub`` (public key, PEM); refuse to overwrite either. Return (public path, fingerprint)."""
    ed25519, serialization = crypto()
    path = Path(path)
    pub = path.with_name(path.name + ".pub")
    for p in (path, pub):
        if p.exists() or p.is_symlink():
            raise InputError(f"{p} already exists; anonflow keygen never overwrites a key file")
    if not path.parent.is_dir():
        raise InputError(f"folder {path.parent} does not exist")
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    written = []
    try:
        for p, data, mode in ((path, private, 0o600), (pub, public, 0o644)):
            try:
                fd = os.open(str(p), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                raise InputError(f"{p} already exists; anonflow keygen never overwrites a key file") from None
            written.append(p)
            with os.fdopen(fd, "wb") as fh:
                os.fchmod(fh.fileno(), mode)
                fh.write(data)
    except BaseException:
        for p in written:
            p.unlink(missing_ok=True)
        raise
    return pub, key_fingerprint(key.public_key())


def signature_b64(key: Any, data: bytes) -> bytes:
    return base64.b64encode(key.sign(data)) + b"\n"


def check_signature(release: Path, manifest: Mapping[str, Any], public_key: Any, key_path: Path | None,
                     f: Findings) -> dict[str, Any]:
    """The signature's finding; returns ``{"status", ...}``: ``unsigned``, ``signed-unchecked``
    (signed, no ``--key``), ``valid`` or ``invalid``."""
    sig = manifest.get("signature")
    sig_file = release / SIGNATURE
    why = not_regular(sig_file)
    if why is not None and why != "does not exist":
        f.add(False, "signature", f"{SIGNATURE} {why}: not opened (a release holds only regular files)")
        return {"status": "invalid", "reason": "not a regular file"}
    has_file = why is None
    fp = sig.get("public_key_sha256") if isinstance(sig, dict) else None
    if sig is None and not has_file:
        if public_key is not None:
            f.add(False, "signature", f"the release is unsigned (no {SIGNATURE}, and the manifest records no "
                                      f"signature), but --key {key_path} asks for a signed one")
            return {"status": "invalid", "reason": "unsigned"}
        f.add(True, "signature", show=True, detail="unsigned: the release carries no signature; its authenticity rests on where you got "
                                 "it (a release signed with the publisher's 'sign' is checked with --key)")
        return {"status": "unsigned"}
    if not isinstance(sig, dict) or not has_file:
        f.add(False, "signature", f"{SIGNATURE} is missing, but the manifest records a signature" if not has_file else
              f"{SIGNATURE} is present, but the manifest records no signature")
        return {"status": "invalid", "reason": "inconsistent"}
    if public_key is None:
        f.add(True, "signature", show=True, detail=f"signed (Ed25519, public key sha256 {fp}), but the signature was not checked: "
                                 "give --key PUBLIC_KEY")
        return {"status": "signed-unchecked", "public_key_sha256": fp}
    given = key_fingerprint(public_key)
    try:
        with os.fdopen(open_regular(sig_file), "rb") as fh:
            raw = base64.b64decode(fh.read(1 << 16).strip(), validate=True)
        with os.fdopen(open_regular(release / MANIFEST), "rb") as fh:
            signed_bytes = fh.read()
        public_key.verify(raw, signed_bytes)
        good = True
    except Exception:
        good = False
    if not good:
        f.add(False, "signature", f"{SIGNATURE} is not a valid signature of {MANIFEST} under the key {key_path} "
                                  f"(sha256 {short(given)}): the manifest (or a file it lists, with its digests "
                                  "recomputed) was changed after signing, or it was signed with another key")
        return {"status": "invalid", "public_key_sha256": fp, "key": given}
    if fp != given:
        f.add(False, "signature", f"the manifest records public key sha256 {short(fp)}, but it verifies under "
                                  f"{short(given)}")
        return {"status": "invalid", "public_key_sha256": fp, "key": given}
    f.add(True, "signature", show=True, detail=f"{SIGNATURE} is a valid Ed25519 signature of {MANIFEST} by the key {key_path} "
                             f"(sha256 {given})")
    return {"status": "valid", "public_key_sha256": fp}


def unsigned_form(manifest: Mapping[str, Any]) -> bytes:
    """The manifest's bytes as if unsigned (a re-run signs with a throwaway key)."""
    body = {k: v for k, v in manifest.items() if k != "integrity"}
    body["signature"] = None
    body["integrity"] = integrity(body)
    return manifest_bytes(body)
