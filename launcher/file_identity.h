// Which build of a file a host has, cheaply enough to ask on every launch: the ssh runner's
// pre-flight checks that every host runs the same dscpp and sees the same program files.
//
// An ELF file is identified by its GNU build id (the linker's hash of its contents, in a
// NT_GNU_BUILD_ID note that Debian's and most distributions' gcc/ld emit by default) plus its
// size, the size catching a truncated or stripped copy that kept the note. Reading the note is a
// few small reads where hashing the ~156 MB of dscpp, dscpp-runtime and a plugin took ~2 s per
// launch. Files without a build id (scripts, binaries linked with --build-id=none) are
// identified by their SHA-256: those are small, or rare.
//
// Another host is asked with a short /bin/sh command of coreutils (wc, od, sha256sum), not by
// running its dscpp: that dscpp is one of the files being checked, and a different or older
// build there must be reported, not executed (an older one would take an unknown subcommand for
// a PROGRAM and launch it). Since the local copy tells where its build id lies, the other host
// only prints the bytes at that offset: equal bytes and size mean the same build.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dscpp::launcher {

struct ElfBuildId {
  std::string hex;           // lowercase, two digits per byte
  std::uint64_t offset = 0;  // where the id's bytes start in the file
};

// The NT_GNU_BUILD_ID of the ELF file at `path`, from its PT_NOTE segments (or its SHT_NOTE
// sections when it has no program headers), 32- or 64-bit, either byte order. nullopt for a
// file that is not ELF, or ELF without a build id. Throws dscpp::Error when it cannot be read.
std::optional<ElfBuildId> elf_build_id(const std::string& path);

struct FileIdentity {
  std::string path;
  std::string problem;  // "" when identified; else e.g. "does not exist"
  std::uint64_t size = 0;
  std::optional<ElfBuildId> build_id;  // when absent, `sha256` identifies the file
  std::string sha256;                  // lowercase hex

  bool ok() const { return problem.empty(); }
  std::string describe() const;  // "build id 15dfff3239aa..." or "sha256 0b1c..." (12 digits)
};

// `path`'s identity on this host (symlinks followed). Never throws: what went wrong is `problem`.
FileIdentity identify_file(const std::string& path);

// One /bin/sh command (exit status 0) that prints one line about `local.path` as the host
// running it sees that path, in the form compare_probe reads. `local` must be ok().
std::string identity_probe(const FileIdentity& local);

struct ProbeVerdict {
  enum Kind { same, different, missing, not_regular, unreadable, no_answer } kind = no_answer;
  std::string detail;  // for `different`: what differs, e.g. "build id 15dfff3239aa... here, not there"
};

// Reads the line identity_probe printed on another host and compares it with `local`.
ProbeVerdict compare_probe(const FileIdentity& local, std::string_view line);

}  // namespace dscpp::launcher
