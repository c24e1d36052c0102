#!/usr/bin/python3
"""Writes TriAttention calibration fixtures for tests/unit/triattention/calibration_test.cc.

Usage: make_calibration.py OUT_DIR

Standard library only (no torch): the .pt files are written the way torch.save writes them, a zip
archive of `<archive>/data.pkl` (a protocol-2 pickle), `<archive>/data/<key>` (raw little-endian
storages), `<archive>/byteorder` and `<archive>/version`. The pickle is produced by Python's own
pickler, with stand-ins registered as the modules `torch` and `torch._utils`, so that it names
exactly the globals torch's does: tensors reduce to torch._utils._rebuild_tensor_v2(storage,
offset, size, stride, requires_grad, OrderedDict()) and storages become persistent ids
('storage', torch.FloatStorage, key, 'cpu', numel).

Geometry: L = 3 layers, H = 4 query heads, F = 8 bands (head_dim 16); head (layer 1, head 2) is
left out of the official files. Values (the C++ test recomputes them in double, then float):
  q_mean_real[l][h][f] = l + h / 100 + f / 10000
  q_mean_imag[l][h][f] = h / 10 - (l + 1) - f / 1000
  q_abs_mean[l][h][f]  = 2 + l + h / 10 + f / 100
  omega[f] = 1 / 2**f,  freq_scale_sq[f] = 1.5625
Besides the valid files it writes hostile variants; calibration_test.cc lists what each must fail
with.
"""

import collections
import io
import json
import math
import os
import pickle
import struct
import sys
import types
import zipfile
import zlib

LAYERS, HEADS, BANDS = 3, 4, 8
HEAD_DIM = 2 * BANDS
MISSING = (1, 2)
MODEL_NAME = "test/tiny-model"


def q_mean_real(l, h, f):
    return l + h / 100 + f / 10000


def q_mean_imag(l, h, f):
    return h / 10 - (l + 1) - f / 1000


def q_abs_mean(l, h, f):
    return 2 + l + h / 10 + f / 100


OMEGA = [1 / 2**f for f in range(BANDS)]
FREQ_SCALE_SQ = [1.5625] * BANDS

# --- Stand-ins for the torch names a torch.save pickle refers to. -------------------------------

torch_module = types.ModuleType("torch")
torch_utils_module = types.ModuleType("torch._utils")
torch_module._utils = torch_utils_module
sys.modules["torch"] = torch_module
sys.modules["torch._utils"] = torch_utils_module


def _storage_type(name):
    cls = type(name, (), {"__module__": "torch"})
    setattr(torch_module, name, cls)
    return cls


FloatStorage = _storage_type("FloatStorage")
ComplexFloatStorage = _storage_type("ComplexFloatStorage")
BFloat16Storage = _storage_type("BFloat16Storage")


def _rebuild_tensor_v2(*args):
    raise RuntimeError("a stand-in; the C++ reader interprets this name")


_rebuild_tensor_v2.__module__ = "torch._utils"
_rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
torch_utils_module._rebuild_tensor_v2 = _rebuild_tensor_v2

ELEMENT_BYTES = {FloatStorage: 4, ComplexFloatStorage: 8, BFloat16Storage: 2}


class Storage:
    """One storage: a zip entry data/<key> of raw little-endian bytes."""

    def __init__(self, storage_type, key, raw, numel=None):
        self.storage_type = storage_type
        self.key = key
        self.raw = raw
        self.numel = len(raw) // ELEMENT_BYTES[storage_type] if numel is None else numel


class Tensor:
    def __init__(self, storage, offset, shape, stride, hooks=None):
        self.storage = storage
        self.offset = offset
        self.shape = tuple(shape)
        self.stride = tuple(stride)
        self.hooks = hooks if hooks is not None else collections.OrderedDict()

    def __reduce_ex__(self, protocol):
        return (_rebuild_tensor_v2,
                (self.storage, self.offset, self.shape, self.stride, False, self.hooks))


class TorchPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.storage_type, obj.key, "cpu", obj.numel)
        return None


def torch_pickle(obj):
    out = io.BytesIO()
    TorchPickler(out, protocol=2).dump(obj)
    return out.getvalue()


class Storages:
    """Hands out storage keys "0", "1", ... in creation order, as torch.save does."""

    def __init__(self):
        self.items = []

    def add(self, storage_type, raw, numel=None, key=None):
        storage = Storage(storage_type, key if key is not None else str(len(self.items)), raw,
                          numel)
        self.items.append(storage)
        return storage

    def floats(self, values, storage_type=FloatStorage):
        if storage_type is BFloat16Storage:
            raw = b"".join(struct.pack("<f", v)[2:] for v in values)
        else:
            raw = struct.pack("<%df" % len(values), *values)
        storage = self.add(storage_type, raw)
        return Tensor(storage, 0, [len(values)], [1])


# --- Writing archives. -----------------------------------------------------------------------


def write_torch_zip(path, pickle_bytes, storages, archive="archive", byteorder=b"little",
                    compress_pickle=False, skip_keys=()):
    """A torch.save archive written with zipfile (stored entries, sizes in the local headers)."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{archive}/data.pkl", pickle_bytes,
                   compress_type=zipfile.ZIP_DEFLATED if compress_pickle else zipfile.ZIP_STORED)
        z.writestr(f"{archive}/byteorder", byteorder)
        for storage in storages.items:
            if storage.key not in skip_keys:
                z.writestr(f"{archive}/data/{storage.key}", storage.raw)
        z.writestr(f"{archive}/version", b"3\n")
        z.writestr(f"{archive}/.data/serialization_id", b"1234567890123456789012345")


def write_miniz_zip(path, records, saturate_end_record=False):
    """A zip laid out as torch's miniz writer does it: general-purpose bit 3 with zero sizes in
    the local header and a ZIP64 data descriptor after the data, an 'FB' extra field padding each
    entry's data to 64 bytes, and ZIP64 end records before the classic one."""
    out = bytearray()
    central = bytearray()
    for name, data in records:
        encoded = name.encode()
        offset = len(out)
        start = offset + 30 + len(encoded) + 4
        pad = (-start) % 64
        extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        crc = zlib.crc32(data)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0x0008, 0, 0, 0x21, 0, 0, 0,
                           len(encoded), len(extra))
        out += encoded + extra + data
        out += struct.pack("<IIQQ", 0x08074B50, crc, len(data), len(data))
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0x0008, 0, 0,
                               0x21, crc, len(data), len(data), len(encoded), 0, 0, 0, 0, 0,
                               offset)
        central += encoded
    cd_offset = len(out)
    out += central
    zip64_end = len(out)
    count = len(records)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, count, count,
                       len(central), cd_offset)
    out += struct.pack("<IIQI", 0x07064B50, 0, zip64_end, 1)
    shown = 0xFFFF if saturate_end_record else count
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, shown, shown, len(central), cd_offset, 0)
    with open(path, "wb") as f:
        f.write(out)


def write_safetensors(path, tensors, metadata=None, header_override=None, header_bytes=None):
    """tensors: list of (name, dtype, shape, raw bytes), laid out in order. header_bytes: pad the
    header with spaces to this length instead of to the next multiple of 8."""
    header = {}
    offset = 0
    data = bytearray()
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = (header_override if header_override is not None
            else json.dumps(header, separators=(",", ":"))).encode()
    pad_to = header_bytes if header_bytes is not None else len(text) + (-len(text)) % 8
    assert pad_to >= len(text)
    text += b" " * (pad_to - len(text))
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(data))


# --- The payloads. ---------------------------------------------------------------------------


def heads():
    return [(l, h) for l in range(LAYERS) for h in range(HEADS) if (l, h) != MISSING]


def band_values(fn, l, h):
    return [fn(l, h, f) for f in range(BANDS)]


def official_payload(storages, tweak=None, layout="plain"):
    """The official {metadata, stats} dict. `tweak(l, h, name, values)` may return a Tensor to use
    instead of the normal one. layout "strided": real and imaginary parts are stride-2 views of one
    shared storage (what `q_mean_complex.real` saves when calibrate.py runs on the CPU), and each
    layer's q_abs_mean values are slices of one storage at non-zero offsets."""
    stats = {}
    abs_storages = {}
    for l, h in heads():
        entry = {}
        if layout == "strided":
            pairs = []
            for f in range(BANDS):
                pairs += [q_mean_real(l, h, f), q_mean_imag(l, h, f)]
            shared = storages.add(FloatStorage, struct.pack("<%df" % len(pairs), *pairs))
            entry["q_mean_real"] = Tensor(shared, 0, [BANDS], [2])
            entry["q_mean_imag"] = Tensor(shared, 1, [BANDS], [2])
            if l not in abs_storages:
                layer_values = []
                for hh in range(HEADS):
                    layer_values += band_values(q_abs_mean, l, hh)
                abs_storages[l] = storages.add(
                    FloatStorage, struct.pack("<%df" % len(layer_values), *layer_values))
            entry["q_abs_mean"] = Tensor(abs_storages[l], h * BANDS, [BANDS], [1])
        else:
            for name, fn in (("q_mean_real", q_mean_real), ("q_mean_imag", q_mean_imag),
                             ("q_abs_mean", q_abs_mean)):
                values = band_values(fn, l, h)
                replaced = tweak(l, h, name, values) if tweak else None
                entry[name] = replaced if replaced is not None else storages.floats(values)
        stats[f"layer{l:02d}_head{h:02d}"] = entry
    metadata = {
        "num_traces": 1,
        "head_dim": HEAD_DIM,
        "dtype": "bfloat16",
        "use_chat_template": False,
        "system_prompt": "",
        "rope_style": "half",
        "rope_type": "yarn",
        "rope_scaling": {"factor": 32.0, "beta_fast": 32, "truncate": False},
        "rope_theta": 150000,
        "sampled_heads": [[l, h] for l, h in heads()],
        "model_name": MODEL_NAME,
    }
    return {"metadata": metadata, "stats": stats}


def flat_payload(storages, drop=None, e_q_dtype=ComplexFloatStorage):
    shape = [LAYERS, HEADS, BANDS]
    e_q = []
    norm = []
    for l in range(LAYERS):
        for h in range(HEADS):
            for f in range(BANDS):
                present = (l, h) != MISSING
                e_q += [q_mean_real(l, h, f) if present else 0.0,
                        q_mean_imag(l, h, f) if present else 0.0]
                norm.append(q_abs_mean(l, h, f) if present else 0.0)
    stride = [HEADS * BANDS, BANDS, 1]
    if e_q_dtype is ComplexFloatStorage:
        e_q_tensor = Tensor(storages.add(ComplexFloatStorage, struct.pack("<%df" % len(e_q), *e_q)),
                            0, shape, stride)
    else:
        e_q_tensor = Tensor(storages.add(FloatStorage, struct.pack("<%df" % len(norm), *norm)), 0,
                            shape, stride)
    payload = {
        "E_q": e_q_tensor,
        "E_q_norm": Tensor(storages.add(FloatStorage, struct.pack("<%df" % len(norm), *norm)), 0,
                           shape, stride),
        "omega": storages.floats(OMEGA),
        "freq_scale_sq": storages.floats(FREQ_SCALE_SQ),
        "model_path": "/models/tiny",  # extra keys are tolerated
    }
    if drop:
        del payload[drop]
    return payload


def safetensors_tensors():
    real, imag, norm = [], [], []
    for l in range(LAYERS):
        for h in range(HEADS):
            for f in range(BANDS):
                present = (l, h) != MISSING
                real.append(q_mean_real(l, h, f) if present else 0.0)
                imag.append(q_mean_imag(l, h, f) if present else 0.0)
                norm.append(q_abs_mean(l, h, f) if present else 0.0)
    shape = [LAYERS, HEADS, BANDS]

    def f32(values):
        return struct.pack("<%df" % len(values), *values)

    return [
        ("E_q_real", "F32", shape, f32(real)),
        ("E_q_imag", "F32", shape, f32(imag)),
        ("E_q_norm", "F32", shape, f32(norm)),
        ("freq_scale_sq", "F32", [BANDS], f32(FREQ_SCALE_SQ)),
        ("omega", "F32", [BANDS], f32(OMEGA)),
        ("token_count", "I64", [LAYERS], struct.pack("<3q", 4096, 4096, 4096)),
    ]


SAFETENSORS_METADATA = {"rope_style": "half", "head_dim": str(HEAD_DIM), "model_name": MODEL_NAME}


def write_official(path, tweak=None, payload_edit=None, layout="plain", **zip_args):
    storages = Storages()
    payload = official_payload(storages, tweak, layout)
    if payload_edit:
        payload_edit(payload, storages)
    write_torch_zip(path, torch_pickle(payload), storages, **zip_args)


def write_pickle_zip(path, pickle_bytes):
    write_torch_zip(path, pickle_bytes, Storages())


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_calibration.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    def p(name):
        return os.path.join(out, name)

    # Valid files.
    write_official(p("official.pt"))
    write_official(p("official_strided.pt"), layout="strided")

    def no_optional_metadata(payload, storages):
        for key in ("sampled_heads", "model_name", "head_dim"):
            del payload["metadata"][key]

    write_official(p("official_minimal_metadata.pt"), payload_edit=no_optional_metadata)
    storages = Storages()
    pickle_bytes = torch_pickle(official_payload(storages))
    records = [("official_miniz/data.pkl", pickle_bytes),
               ("official_miniz/.format_version", b"1"),
               ("official_miniz/.storage_alignment", b"64"),
               ("official_miniz/byteorder", b"little")]
    records += [(f"official_miniz/data/{s.key}", s.raw) for s in storages.items]
    records += [("official_miniz/version", b"3\n"),
                ("official_miniz/.data/serialization_id", b"1234567890")]
    write_miniz_zip(p("official_miniz.pt"), records)
    write_miniz_zip(p("zip64_end_record.pt"), records, saturate_end_record=True)

    storages = Storages()
    write_torch_zip(p("flat.pt"), torch_pickle(flat_payload(storages)), storages)
    write_safetensors(p("calibration.safetensors"), safetensors_tensors(), SAFETENSORS_METADATA)
    # A header of 0x380 bytes: the file's first byte is 0x80, like a pickle's PROTO.
    write_safetensors(p("header_0x380.safetensors"), safetensors_tensors(), SAFETENSORS_METADATA,
                      header_bytes=0x380)

    # Hostile pickles.
    write_pickle_zip(p("global_os_system.pt"),
                     b"\x80\x02cos\nsystem\nq\x00X\x05\x00\x00\x00touchq\x01\x85q\x02Rq\x03.")

    class EvalReducer:
        def __reduce__(self):
            return (eval, ("1 + 1",))

    write_pickle_zip(p("global_builtins_eval.pt"), pickle.dumps(EvalReducer(), protocol=4))
    write_pickle_zip(p("opcode_inst.pt"), b"\x80\x02(i__main__\nThing\n.")
    write_pickle_zip(p("root_list.pt"), pickle.dumps([1, 2, 3], protocol=2))
    write_pickle_zip(p("neither_form.pt"), pickle.dumps({"foo": 1, "bar": [2.5]}, protocol=2))

    # Hostile archives.
    write_official(p("compressed.pt"), compress_pickle=True)
    with open(p("official.pt"), "rb") as f:
        official = f.read()
    with open(p("truncated_zip.pt"), "wb") as f:
        f.write(official[: len(official) // 2])
    storages = Storages()
    write_torch_zip(p("truncated_pickle.pt"), torch_pickle(official_payload(storages))[:-1],
                    storages)
    write_official(p("byteorder_big.pt"), byteorder=b"big")
    write_official(p("storage_missing.pt"), skip_keys=("5",))

    # A flipped byte inside storage 0's data: the CRC-32 no longer matches.
    with zipfile.ZipFile(p("official.pt")) as z:
        info = z.getinfo("archive/data/0")
    local = info.header_offset
    name_len, extra_len = struct.unpack("<HH", official[local + 26: local + 30])
    data_at = local + 30 + name_len + extra_len
    flipped = bytearray(official)
    flipped[data_at] ^= 0x40
    with open(p("crc_mismatch.pt"), "wb") as f:
        f.write(flipped)

    # Hostile tensors and values.
    def at(layer, head, name, make):
        def tweak(l, h, n, values):
            return make(values) if (l, h, n) == (layer, head, name) else None
        return tweak

    scratch = Storages()  # keys from 1000 on, so they cannot collide with the payload's

    def storage_for(values, storage_type=FloatStorage, numel=None):
        key = str(1000 + len(scratch.items))
        if storage_type is BFloat16Storage:
            raw = b"".join(struct.pack("<f", v)[2:] for v in values)
        else:
            raw = struct.pack("<%df" % len(values), *values)
        return scratch.add(storage_type, raw, numel, key=key)

    def write_tweaked(name, tweak):
        storages = Storages()
        payload = official_payload(storages, tweak)
        scratch_items = list(scratch.items)
        scratch.items.clear()
        storages.items += scratch_items
        write_torch_zip(p(name), torch_pickle(payload), storages)

    write_tweaked("storage_offset_out_of_range.pt", at(0, 1, "q_mean_real", lambda v: Tensor(
        storage_for(v), 3, [BANDS], [1])))
    write_tweaked("storage_size_mismatch.pt", at(0, 1, "q_mean_real", lambda v: Tensor(
        storage_for(v, numel=BANDS + 1), 0, [BANDS], [1])))
    write_tweaked("wrong_dtype.pt", at(0, 1, "q_mean_real", lambda v: Tensor(
        storage_for(v, BFloat16Storage), 0, [BANDS], [1])))
    write_tweaked("mismatched_lengths.pt", at(2, 3, "q_abs_mean", lambda v: Tensor(
        storage_for(v[:-1]), 0, [BANDS - 1], [1])))
    write_tweaked("nan.pt", at(0, 2, "q_mean_imag", lambda v: Tensor(
        storage_for(v[:3] + [math.nan] + v[4:]), 0, [BANDS], [1])))
    write_tweaked("negative_abs.pt", at(1, 0, "q_abs_mean", lambda v: Tensor(
        storage_for(v[:5] + [-0.5] + v[6:]), 0, [BANDS], [1])))
    write_tweaked("backward_hooks.pt", at(0, 0, "q_mean_real", lambda v: Tensor(
        storage_for(v), 0, [BANDS], [1], hooks=collections.OrderedDict([("hook", 1)]))))

    def edit(fn):
        def payload_edit(payload, storages):
            fn(payload)
        return payload_edit

    write_official(p("rope_interleaved.pt"),
                   payload_edit=edit(lambda d: d["metadata"].update(rope_style="interleaved")))
    write_official(p("duplicate_sampled.pt"), payload_edit=edit(
        lambda d: d["metadata"]["sampled_heads"].append([0, 1])))
    write_official(p("unsampled_stats.pt"), payload_edit=edit(
        lambda d: d["metadata"]["sampled_heads"].remove([2, 0])))
    write_official(p("sampled_without_stats.pt"), payload_edit=edit(
        lambda d: d["metadata"]["sampled_heads"].append([1, 2])))
    write_official(p("bad_key.pt"), payload_edit=edit(
        lambda d: d["stats"].__setitem__("layer1_head03", d["stats"].pop("layer01_head03"))))
    write_official(p("head_dim_mismatch.pt"),
                   payload_edit=edit(lambda d: d["metadata"].update(head_dim=32)))

    storages = Storages()
    write_torch_zip(p("flat_missing_key.pt"),
                    torch_pickle(flat_payload(storages, drop="freq_scale_sq")), storages)
    storages = Storages()
    write_torch_zip(p("flat_wrong_dtype.pt"),
                    torch_pickle(flat_payload(storages, e_q_dtype=FloatStorage)), storages)

    # A legacy (pre-zip) torch.save file starts with a pickle, not "PK".
    with open(p("legacy.pt"), "wb") as f:
        f.write(b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.")

    # Hostile safetensors files.
    good = safetensors_tensors()

    def st(name, tensors, metadata=SAFETENSORS_METADATA, header_override=None):
        write_safetensors(p(name), tensors, metadata, header_override)

    with open(p("calibration.safetensors"), "rb") as f:
        st_bytes = f.read()
    with open(p("st_truncated.safetensors"), "wb") as f:
        f.write(st_bytes[: len(st_bytes) - 100])
    with open(p("st_header_too_long.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 1 << 40) + st_bytes[8:])
    st("st_f16.safetensors", [t if t[0] != "E_q_norm" else
                              ("E_q_norm", "F16", t[2], t[3][: len(t[3]) // 2]) for t in good])
    st("st_missing.safetensors", [t for t in good if t[0] != "E_q_imag"])
    st("st_shape_mismatch.safetensors", [t if t[0] != "E_q_imag" else
                                         ("E_q_imag", "F32", [LAYERS, BANDS, HEADS], t[3])
                                         for t in good])
    st("st_inf.safetensors", [t if t[0] != "omega" else
                              ("omega", "F32", [BANDS],
                               struct.pack("<%df" % BANDS, *(OMEGA[:2] + [math.inf] + OMEGA[3:])))
                              for t in good])
    st("st_rope_interleaved.safetensors", good, dict(SAFETENSORS_METADATA,
                                                     rope_style="interleaved"))

    # Hand-written headers over the valid data region.
    header = {}
    offset = 0
    for name, dtype, shape, raw in good:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    data_bytes = b"".join(t[3] for t in good)

    def st_header(name, text):
        text = text.encode()
        text += b" " * ((-len(text)) % 8)
        with open(p(name), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + data_bytes)

    overlap = json.loads(json.dumps(header))
    overlap["omega"]["data_offsets"] = [overlap["omega"]["data_offsets"][0] - 4,
                                        overlap["omega"]["data_offsets"][1] - 4]
    st_header("st_overlap.safetensors", json.dumps(overlap))
    beyond = json.loads(json.dumps(header))
    beyond["token_count"]["data_offsets"] = [offset - 24, offset + 8]
    beyond["token_count"]["shape"] = [4]
    st_header("st_out_of_range.safetensors", json.dumps(beyond))
    short = json.loads(json.dumps(header))
    short["omega"]["shape"] = [BANDS + 1]
    st_header("st_size_mismatch.safetensors", json.dumps(short))
    text = json.dumps(header)
    st_header("st_duplicate_key.safetensors",
              text[:-1] + ',"omega":' + json.dumps(header["omega"]) + "}")


if __name__ == "__main__":
    main()
