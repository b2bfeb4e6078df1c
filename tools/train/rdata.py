"""Minimal reader for R lazy-load databases (Rdata.rdx / Rdata.rdb) and .rda files.

Only what is needed to pull character vectors out of R data packages: the XDR
serialization format (versions 2 and 3) for the common SEXP types.  No R needed.
"""
import bz2
import gzip
import lzma
import struct
import zlib


class _Reader:
    def __init__(self, data):
        self.d = data
        self.p = 0
        self.refs = []

    def int(self):
        v = struct.unpack_from(">i", self.d, self.p)[0]
        self.p += 4
        return v

    def bytes(self, n):
        b = self.d[self.p:self.p + n]
        self.p += n
        return b

    def length(self):
        n = self.int()
        if n == -1:
            hi, lo = self.int(), self.int()
            n = (hi << 32) + lo
        return n

    def item(self):
        flags = self.int()
        t = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if t == 254 or t == 0:  # NILVALUE_SXP / NILSXP
            return None
        if t in (253, 252, 251, 250, 242, 241):  # special environments / markers
            return ("<special>", t)
        if t == 255:  # REFSXP
            idx = flags >> 8
            if idx == 0:
                idx = self.int()
            return self.refs[idx - 1]
        if t == 247:  # PERSISTSXP
            v = self.item()
            self.refs.append(("<persist>", v))
            return self.refs[-1]
        if t in (249, 248):  # NAMESPACESXP, PACKAGESXP
            v = self.item()
            self.refs.append(("<namespace>", v))
            return self.refs[-1]
        if t == 1:  # SYMSXP
            name = self.item()
            sym = ("<sym>", name)
            self.refs.append(sym)
            return sym
        if t == 4:  # ENVSXP
            env = {"<env>": True}
            self.refs.append(env)
            self.int()  # locked
            env["enclos"] = self.item()
            env["frame"] = self.item()
            env["hashtab"] = self.item()
            env["attr"] = self.item()
            return env
        if t in (2, 3, 5, 6, 17, 239, 240):  # pairlist-like
            attr = self.item() if has_attr else None
            tag = self.item() if has_tag else None
            car = self.item()
            cdr = self.item()
            items = [(tag, car)]
            if isinstance(cdr, list) and cdr and cdr[0] == "<pairlist>":
                items += cdr[1]
            return ["<pairlist>", items, attr]
        if t == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            return self.bytes(n).decode("utf-8", errors="replace")
        if t in (10, 13):  # LGLSXP, INTSXP
            n = self.length()
            v = list(struct.unpack_from(">%di" % n, self.d, self.p))
            self.p += 4 * n
            out = v
        elif t == 14:  # REALSXP
            n = self.length()
            v = list(struct.unpack_from(">%dd" % n, self.d, self.p))
            self.p += 8 * n
            out = v
        elif t == 15:  # CPLXSXP
            n = self.length()
            self.p += 16 * n
            out = ["<complex>"] * n
        elif t == 16:  # STRSXP
            n = self.length()
            out = [self.item() for _ in range(n)]
        elif t in (19, 20):  # VECSXP, EXPRSXP
            n = self.length()
            out = [self.item() for _ in range(n)]
        elif t == 24:  # RAWSXP
            n = self.length()
            out = self.bytes(n)
        elif t == 25:  # S4SXP
            out = ("<S4>",)
        elif t == 238:  # ALTREP_SXP
            info = self.item()
            state = self.item()
            attr = self.item()
            return ("<altrep>", info, state, attr)
        else:
            raise ValueError("unsupported SEXP type %d at %d" % (t, self.p))
        if has_attr:
            attr = self.item()
            return ("<vec>", out, attr)
        return out


def unserialize(data):
    r = _Reader(data)
    fmt = r.bytes(2)
    if fmt != b"X\n":
        raise ValueError("only XDR serialization is supported, got %r" % fmt)
    version = r.int()
    r.int()
    r.int()
    if version == 3:
        n = r.int()
        r.bytes(n)
    return r.item()


def _decompress_blob(b):
    """One object of a lazy-load .rdb (or the .rdx itself)."""
    tail = b[4:]
    try:
        return zlib.decompress(tail)
    except zlib.error:
        pass
    kind, tail = b[4:5], b[5:]
    if kind == b"Z":
        return zlib.decompress(tail)
    if kind == b"2":
        return bz2.decompress(tail)
    if kind == b"X":
        return lzma.decompress(tail)
    if kind == b"0":
        return tail
    raise ValueError("unknown compression %r" % kind)


def attr_get(attr, name):
    if attr is None:
        return None
    for tag, val in attr[1]:
        if isinstance(tag, tuple) and tag[0] == "<sym>" and tag[1] == name:
            return val
    return None


def unvec(x):
    return x[1] if isinstance(x, tuple) and x and x[0] == "<vec>" else x


def load_lazy(prefix):
    """Returns {name: object} for an R lazy-load database prefix (path without .rdx)."""
    raw = open(prefix + ".rdx", "rb").read()
    idx = unserialize(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else _decompress_blob(raw))
    vec = unvec(idx)
    names = unvec(attr_get(idx[2], "names")) if isinstance(idx, tuple) else None
    # idx is a named list: variables, references, compressed
    variables = vec[0]
    var_names = attr_get(variables[2], "names") if isinstance(variables, tuple) else None
    var_list = unvec(variables)
    var_names = unvec(var_names)
    rdb = open(prefix + ".rdb", "rb").read()
    out = {}
    for name, pos in zip(var_names, var_list):
        off, ln = int(unvec(pos)[0]), int(unvec(pos)[1])
        out[name] = unserialize(_decompress_blob(rdb[off:off + ln]))
    return out


def load_rda(path):
    raw = open(path, "rb").read()
    for dec in (gzip.decompress, bz2.decompress, lzma.decompress, lambda x: x):
        try:
            data = dec(raw)
            break
        except Exception:
            continue
    if not data.startswith(b"RDX"):
        raise ValueError("not an .rda file: " + path)
    nl = data.index(b"\n")
    obj = unserialize(data[nl + 1:])
    out = {}
    for tag, val in obj[1]:
        out[tag[1]] = val
    return out
