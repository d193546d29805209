#!/usr/bin/env python3
"""platforms/cortex-m/size_report.py: flash and RAM of the Cortex-M size probes, from their linker
maps, against the budget of this configuration (size_budget.txt). Run by ctest -R cortex_m.size.

  size_report.py --config MinSizeRel --budget size_budget.txt --size arm-none-eabi-size \
                 --probe codecs=build/.../edgefl_size_codecs.elf [--probe ...] [--out report.md]

With --device NAME=ELF (the device client, device_client.cpp) it also prints its flash per
component (client, shared protocol code, TLS, codecs and round steps, trainer, training data,
libc) and its
RAM (.data + .bss per owner, and the stack), with budget quantities `flash` (.text + .data),
`ram` (.data + .bss + stack) and `tls_text`.

For each probe it prints .text (code and read-only data: flash), .data (RAM, and flash for its
initial values), .bss (RAM, without the stack) and who contributes them: edgefl_core,
edgefl_train, edgefl_aggregate, libc/libm/libgcc, the program. For the probe `codecs` it also
breaks edgefl_core down by object file, i.e. by codec family. Exit status 1 if a budget is
exceeded or a map cannot be read.
"""
import argparse
import os
import re
import subprocess
import sys

# What each object file of edgefl_core holds (sdk/src/...).
CORE_OBJECTS = {
    "codec.cpp": "encode/decode/verify pipeline; top-k, threshold, random-k; Elias-Fano and Rice indices",
    "skc_codec.cpp": "SKCompress glue: sizes, encoder over the selected set, decoder (EDGEFL_WITH_SKC)",
    "count_sketch_codec.cpp": "Count Sketch (cs): encode, decode, add (EDGEFL_WITH_COUNT_SKETCH)",
    "add.cpp": "add_encoded: sums of shared-scale codes, fp32 values and sketches",
    "values.cpp": "value coders: fp32, fp16, bf16, uniform q1-q8, QSGD, TernGrad, sign, Hadamard (hq: "
                  "EDGEFL_WITH_HADAMARD)",
    "rans.cpp": "rANS entropy coder (q...:ans, sparq)",
    "skc.cpp": "SKCompress (skc): layout, MinMaxSketch",
    "huffman.cpp": "Huffman coder (skc)",
    "quantile_sketch.cpp": "quantile sketch (skc buckets)",
    "spec.cpp": "codec spec parser and formatter",
    "text.cpp": "number parsing and formatting for specs",
    "format.cpp": "encoding header: write, read, verify",
    "select.cpp": "radix select (top-k)",
    "crc32c.cpp": "CRC32C (one 1 KiB table at -Os, else slicing-by-8: EDGEFL_CRC32C_TABLES)",
    "status.cpp": "status names and messages",
    "kernels_ref.cpp": "scalar kernels (the reference table)",
    "error_feedback.cpp": "error feedback residual",
    "cpu.cpp": "CPU feature detection (none on Cortex-M)",
    "seeds.cpp": "the seeds of a round (round/seeds.h)",
    "update_steps.cpp": "the round's update steps (round/update_steps.h)",
}

OUTPUT_GROUP = {".text": "text", ".ARM.exidx": "text", ".data": "data", ".bss": "bss", ".stack": "stack"}


def owner(path):
    """(library, member) of an input file named in a map."""
    m = re.match(r"^(.*?)([^/]+\.a)\(([^)]+)\)$", path)
    if m:
        lib, member = m.group(2), m.group(3)
        member = re.sub(r"\.obj$|\.o$", "", member)
        member = re.sub(r"^lib_a-", "", member)
        return lib, member
    return "program", re.sub(r"\.obj$|\.o$", "", os.path.basename(path))


def parse_map(path):
    """{(output group, library, member): bytes} from a GNU ld map."""
    sizes = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    try:
        start = lines.index("Linker script and memory map")
    except ValueError:
        raise SystemExit(f"size_report: {path} is not a GNU ld map")
    group = None
    pending = None  # an input section name alone on its line (long names wrap)
    full = re.compile(r"^ (\S+)\s+0x([0-9a-fA-F]+)\s+0x([0-9a-fA-F]+)\s+(\S.*)$")
    cont = re.compile(r"^\s+0x([0-9a-fA-F]+)\s+0x([0-9a-fA-F]+)\s+(\S.*)$")
    fill = re.compile(r"^ \*fill\*\s+0x([0-9a-fA-F]+)\s+0x([0-9a-fA-F]+)\s*$")
    for line in lines[start + 1:]:
        if line and not line[0].isspace():
            name = line.split()[0]
            group = OUTPUT_GROUP.get(name)
            pending = None
            continue
        if group is None:
            continue
        m = full.match(line)
        f = fill.match(line)
        if f:
            section, size, where = "*fill*", int(f.group(2), 16), "fill"
        elif m and not m.group(1).startswith("*"):
            section, size, where = m.group(1), int(m.group(3), 16), m.group(4)
        elif pending is not None and cont.match(line):
            m = cont.match(line)
            section, size, where = pending, int(m.group(2), 16), m.group(3)
        else:
            stripped = line.strip()
            pending = stripped if re.match(r"^\.\S+$", stripped) else None
            continue
        pending = None
        if size == 0:
            continue
        lib, member = ("program", "alignment") if where == "fill" else owner(where.strip())
        key = (group, lib, member)
        sizes[key] = sizes.get(key, 0) + size
    return sizes


def lib_class(lib):
    if lib.startswith("libedgefl_"):
        return lib[len("lib"):-len(".a")]
    if lib in ("libc_nano.a", "libc.a", "libm.a", "libgcc.a", "libg_nano.a"):
        return "libc/libm/libgcc"
    return "program"


def summarize(sizes):
    total = {"text": 0, "data": 0, "bss": 0, "stack": 0}
    by_class = {}
    for (group, lib, _member), size in sizes.items():
        total[group] += size
        c = lib_class(lib)
        by_class.setdefault(c, {"text": 0, "data": 0, "bss": 0, "stack": 0})[group] += size
    return total, by_class


def elf_groups(size_tool, elf):
    """{text, data, bss, stack: bytes} from the ELF's section headers (`size -A`)."""
    groups = {"text": 0, "data": 0, "bss": 0, "stack": 0}
    sysv = subprocess.run([size_tool, "-A", elf], check=True, capture_output=True, text=True).stdout
    for line in sysv.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] in OUTPUT_GROUP and fields[1].isdigit():
            groups[OUTPUT_GROUP[fields[0]]] += int(fields[1])
    return groups


# The device client's components: (name, predicate on (library, member)).
DEVICE_COMPONENTS = [
    ("client: the round, link, credentials (device_client.cpp, board.cpp, credentials.cpp)",
     lambda lib, m: lib == "program" and m in ("device_client.cpp", "board.cpp", "credentials.cpp")),
    ("protocol shared with the hosted clients (sdk/src/wire: frame.cpp, client_tables.cpp, "
     "client_protocol.cpp, checks.cpp)",
     lambda lib, m: lib == "program" and m in ("frame.cpp", "client_tables.cpp", "client_protocol.cpp",
                                               "checks.cpp")),
    ("TLS 1.3 client: mbedTLS 3.6 (edgefl_mbedtls_device_config.h)", lambda lib, m: lib == "libedgefl_cm_mbedtls.a"),
    ("codecs, error feedback, downlink, round steps (edgefl_core)", lambda lib, m: lib == "libedgefl_core.a"),
    ("trainer (edgefl_train)", lambda lib, m: lib == "libedgefl_train.a"),
    ("training data: the Fashion-MNIST shard", lambda lib, m: lib == "program" and m == "device_shard.cpp"),
    ("libc/libm/libgcc", lambda lib, m: lib_class(lib) == "libc/libm/libgcc"),
]


def device_report(name, elf, size_tool):
    """Markdown lines and measured quantities of the device client ELF."""
    sizes = parse_map(elf + ".map")
    sections = elf_groups(size_tool, elf)
    out = [f"\nDevice client `{name}` (a whole round over mutual TLS 1.3), flash by component:\n",
           "| component | .text (flash) | .data + .bss (RAM) |", "| --- | ---: | ---: |"]
    counted = {"text": 0, "ram": 0}
    measured = {}
    for label, pred in DEVICE_COMPONENTS:
        text = sum(v for (g, lib, m), v in sizes.items() if g == "text" and pred(lib, m))
        ram = sum(v for (g, lib, m), v in sizes.items() if g in ("data", "bss") and pred(lib, m))
        counted["text"] += text
        counted["ram"] += ram
        out.append(f"| {label} | {text} | {ram} |")
        if label.startswith("TLS"):
            measured["tls_text"] = text
    total_text = sum(v for (g, _l, _m), v in sizes.items() if g == "text")
    total_ram = sum(v for (g, _l, _m), v in sizes.items() if g in ("data", "bss"))
    out.append(f"| startup, padding, other | {total_text - counted['text']} | {total_ram - counted['ram']} |")
    flash = sections["text"] + sections["data"]
    ram = sections["data"] + sections["bss"] + sections["stack"]
    out.append(f"| **total** (ELF) | **{flash}** ({kib(flash)} KiB, with .data's initial values) | "
               f"**{ram}** ({kib(ram)} KiB, with the {sections['stack']}-byte stack) |")
    measured.update({"flash": flash, "ram": ram, "text": sections["text"]})
    return out, measured


def read_budget(path, config):
    budgets = []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            cfg, probe, what, limit = line.split()[:4]
            if cfg == config:
                budgets.append((probe, what, int(limit)))
    return budgets


def kib(n):
    return f"{n / 1024:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--budget", required=True)
    ap.add_argument("--size", default="arm-none-eabi-size")
    ap.add_argument("--probe", action="append", default=[], help="name=path.elf (its map: path.elf.map)")
    ap.add_argument("--device", help="name=path.elf of the device client (its map: path.elf.map)")
    ap.add_argument("--out")
    args = ap.parse_args()

    out = []
    notes = []
    failures = []
    measured = {}
    out.append(f"### Cortex-M4F, {args.config}\n")
    out.append("| probe | .text | .data | .bss | stack | edgefl .text (core + train + aggregate) | "
               "edgefl .data + .bss | libc/libm/libgcc .text | startup, probe, padding .text |")
    out.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    core_objects = None
    for spec in args.probe:
        name, elf = spec.split("=", 1)
        sizes = parse_map(elf + ".map")
        total, by_class = summarize(sizes)
        # The totals come from the ELF's section headers; the map must account for all of them.
        elf = elf_groups(args.size, elf)
        merged = 0
        for group in ("text", "data", "bss"):
            # Input sections may sum to more than the output: the linker merges equal strings.
            if total[group] < elf[group] or (group != "text" and total[group] != elf[group]):
                failures.append(f"{name}: the map accounts for {total[group]} bytes of .{group}, the ELF has {elf[group]}")
            if group == "text":
                merged = total[group] - elf[group]
        total.update({g: elf[g] for g in elf})
        if merged:
            notes.append(f"{name}: {merged} bytes of equal strings merged by the linker (counted per object above)")
        sdk = {g: sum(v[g] for c, v in by_class.items() if c.startswith("edgefl_")) for g in total}
        libs = by_class.get("libc/libm/libgcc", {"text": 0})
        prog = by_class.get("program", {"text": 0})
        measured[name] = {"text": total["text"], "data": total["data"], "bss": total["bss"],
                          "sdk_text": sdk["text"], "sdk_ram": sdk["data"] + sdk["bss"],
                          "core_text": by_class.get("edgefl_core", {"text": 0})["text"]}
        out.append(f"| {name} | {total['text']} | {total['data']} | {total['bss']} | {total['stack']} | "
                   f"{sdk['text']} ({kib(sdk['text'])} KiB) | {sdk['data'] + sdk['bss']} | {libs['text']} | {prog['text']} |")
        if name == "codecs":
            core_objects = {}
            for (group, lib, member), size in sizes.items():
                if lib == "libedgefl_core.a" and group == "text":
                    core_objects[member] = core_objects.get(member, 0) + size
    for note in notes:
        out.append(f"\n({note})")
    if core_objects:
        out.append("\nedgefl_core in the probe `codecs` (all codecs, encode and decode), by object:\n")
        out.append("| object | .text | what |")
        out.append("| --- | ---: | --- |")
        for member, size in sorted(core_objects.items(), key=lambda kv: -kv[1]):
            out.append(f"| {member} | {size} | {CORE_OBJECTS.get(member, '')} |")
        out.append(f"| (total) | {sum(core_objects.values())} | |")

    if args.device:
        name, elf = args.device.split("=", 1)
        lines, measured[name] = device_report(name, elf, args.size)
        out.extend(lines)

    budgets = read_budget(args.budget, args.config)
    if budgets:
        out.append("\nBudgets (size_budget.txt):\n")
        for probe, what, limit in budgets:
            if probe not in measured:
                failures.append(f"budget for unknown probe {probe}")
                continue
            value = measured[probe].get(what)
            if value is None:
                failures.append(f"unknown quantity {what}")
                continue
            verdict = "ok" if value <= limit else "OVER BUDGET"
            out.append(f"- {probe} {what}: {value} bytes <= {limit} ({kib(value)} of {kib(limit)} KiB): {verdict}")
            if value > limit:
                failures.append(f"{probe} {what} = {value} > {limit}")
    else:
        out.append(f"\n(no budget for {args.config} in size_budget.txt: report only)")

    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    if failures:
        print("size_report: FAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
