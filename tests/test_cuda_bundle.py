"""tools/cuda_bundle.py: selecting the GPU code of a CUDA library by architecture and kernel.

The library here is a small ELF64 file written byte by byte: a section-name table and a
``.nv_fatbin`` section of two fatbin containers (the second after alignment padding), whose
entries are cubins of sm_80 and sm_90 holding a standard op's kernel, a CUTLASS one, a contrib
op's own, and none."""

from __future__ import annotations

import struct
import sys

import pytest

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import cuda_bundle  # noqa: E402

STANDARD = b"_ZN11onnxruntime4cuda12BinaryKernelIfEEvPKfPf\x00"
CONTRIB = b"_ZN7cutlass6KernelINS_4gemm6kernel4GemmEEEvNT_6ParamsE\x00"
SOFTMAX = b"_ZN11onnxruntime7contrib22attention_softmax_cuda13SoftmaxKernelIfEEvPKfPf\x00"


def _entry(arch: int, payload: bytes) -> bytes:
    """One fatbin entry: a 64-byte header (kind 2, an ELF cubin; the architecture at byte 28)."""
    head = bytearray(64)
    struct.pack_into("<HHIQ", head, 0, 2, 0x0101, 64, len(payload))
    struct.pack_into("<I", head, 28, arch)
    return bytes(head) + payload


def _container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", cuda_bundle.FATBIN_MAGIC, 1, 16, len(body)) + body


def _elf(fatbin: bytes) -> bytearray:
    """An ELF64 file whose sections are null, .shstrtab and .nv_fatbin."""
    names = b"\x00.shstrtab\x00.nv_fatbin\x00"
    data = bytearray(64)
    data[:5] = b"\x7fELF\x02"
    names_at = len(data)
    data += names
    while len(data) % 8:
        data += b"\x00"
    fat_at = len(data)
    data += fatbin
    shoff = len(data)
    sections = [(0, 0, 0), (1, names_at, len(names)), (11, fat_at, len(fatbin))]
    for name, off, size in sections:
        data += struct.pack("<IIQQQQIIQQ", name, 1 if name else 0, 0, 0, off, size, 0, 0, 1, 0)
    struct.pack_into("<Q", data, 0x28, shoff)
    struct.pack_into("<HHH", data, 0x3A, 64, len(sections), 1)
    return data


@pytest.fixture()
def library() -> bytearray:
    first = _container(_entry(80, b"A" * 40 + STANDARD), _entry(90, b"B" * 24 + STANDARD))
    second = _container(_entry(90, b"C" * 16 + CONTRIB), _entry(90, b"D" * 32), _entry(90, b"E" * 8 + SOFTMAX))
    return _elf(first + b"\x00" * (-len(first) % 8) + second)


def _payloads(data: bytearray) -> list[tuple[int, bytes]]:
    return [(arch, bytes(data[start:start + size])) for arch, start, size in cuda_bundle.cubins(data)]


def test_every_cubin_of_both_containers_is_found(library):
    got = _payloads(library)
    assert [arch for arch, _ in got] == [80, 90, 90, 90, 90]
    assert got[0][1] == b"A" * 40 + STANDARD and got[3][1] == b"D" * 32


def test_other_architectures_are_zeroed_and_the_kept_ones_left_whole(library):
    before = _payloads(library)
    sizes = cuda_bundle.select(library, {90})
    after = _payloads(library)
    assert after[0] == (80, bytes(len(before[0][1])))
    assert after[1:] == before[1:]
    assert sizes == {"kept": sum(len(p) for _, p in before[1:]), "zeroed": len(before[0][1])}


def test_contrib_only_libraries_are_zeroed_and_the_rest_kept(library):
    before = _payloads(library)
    cuda_bundle.select(library, {90}, cuda_bundle.standard_only)
    after = _payloads(library)
    assert after[1] == before[1]  # a standard op's kernel
    assert after[2] == (90, bytes(len(before[2][1])))  # CUTLASS alone
    assert after[3] == before[3]  # no kernel name: nothing says no standard op needs it
    assert after[4] == before[4]  # a contrib op's own kernel, of no contrib-only library


def test_a_file_without_gpu_code_is_one_line():
    plain = _elf(b"")
    plain[plain.index(b".nv_fatbin"):plain.index(b".nv_fatbin") + 10] = b".rodata\x00\x00\x00"
    with pytest.raises(cuda_bundle.BundleError, match="no .nv_fatbin section"):
        cuda_bundle.fatbin_section(plain)
    with pytest.raises(cuda_bundle.BundleError, match="not a 64-bit ELF"):
        cuda_bundle.fatbin_section(b"MZ" + bytes(100))
