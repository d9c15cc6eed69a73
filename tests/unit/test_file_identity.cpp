// File identities for the ssh pre-flight: ELF build ids read from the file against the loader's
// copy in memory and readelf, hand-made ELF layouts, the SHA-256 fallback, the probe another
// host runs, run here by /bin/sh against changed copies, and the gate that runs it before the
// node agent in the same session (gate_prefix).
#include "core/error.h"
#include "launcher/env_export.h"  // shell_quote
#include "launcher/file_identity.h"
#include "launcher/ssh/ssh.h"  // gate_prefix

#include <catch2/catch.hpp>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace dscpp::launcher;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/dscpp-fileid.XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string shell_output(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  pclose(p);
  return out;
}

std::string hex(const unsigned char* data, size_t n) {
  std::string out;
  char two[3];
  for (size_t i = 0; i < n; ++i) std::snprintf(two, sizeof two, "%02x", data[i]), out += two;
  return out;
}

// The build id the dynamic loader mapped for this executable: an independent reading of the same note.
int find_loaded_build_id(dl_phdr_info* info, size_t, void* out) {
  if (info->dlpi_name && info->dlpi_name[0]) return 0;  // the executable has an empty name
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
    const size_t align = ph.p_align == 8 ? 8 : 4;
    auto pad = [align](size_t n) { return (n + align - 1) / align * align; };
    for (size_t at = 0; at + 12 <= ph.p_memsz;) {
      ElfW(Nhdr) n;
      std::memcpy(&n, p + at, sizeof n);
      const size_t desc = at + 12 + pad(n.n_namesz);
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(p + at + 12, "GNU", 4) == 0) {
        *static_cast<std::string*>(out) = hex(p + desc, n.n_descsz);
        return 1;
      }
      at = desc + pad(n.n_descsz);
    }
  }
  return 1;
}

// Hand-made ELF files: header, then either one PT_NOTE program header or (object-file style)
// a section table with one SHT_NOTE section, around the given notes.
struct ElfLayout {
  bool is64 = true;
  bool big_endian = false;
  bool sections_only = false;
  std::string notes;
  uint64_t note_align = 4;
};

std::string field(uint64_t v, int bytes, bool big) {
  std::string out(bytes, '\0');
  for (int i = 0; i < bytes; ++i) out[big ? bytes - 1 - i : i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

std::string note(const std::string& name, uint32_t type, const std::string& desc, bool big, size_t align = 4) {
  auto padded = [align](std::string s) {
    s.resize((s.size() + align - 1) / align * align, '\0');
    return s;
  };
  std::string n = name + std::string(1, '\0');
  return field(n.size(), 4, big) + field(desc.size(), 4, big) + field(type, 4, big) + padded(n) + padded(desc);
}

// The file and the offset its notes start at.
std::pair<std::string, uint64_t> make_elf(const ElfLayout& l) {
  const bool b = l.big_endian;
  const int w = l.is64 ? 8 : 4;
  const uint64_t ehsize = l.is64 ? 64 : 52, phentsize = l.is64 ? 56 : 32, shentsize = l.is64 ? 64 : 40;
  const uint64_t notes_at = ehsize + (l.sections_only ? 0 : phentsize);
  const uint64_t shoff = l.sections_only ? notes_at + l.notes.size() : 0;
  std::string e = std::string(
                      "\x7f"
                      "ELF",
                      4) +
                  char(l.is64 ? 2 : 1) + char(b ? 2 : 1) + char(1);
  e.resize(16, '\0');
  e += field(l.sections_only ? 1 : 2, 2, b) + field(62, 2, b) + field(1, 4, b);          // type, machine, version
  e += field(0, w, b) + field(l.sections_only ? 0 : ehsize, w, b) + field(shoff, w, b);  // entry, phoff, shoff
  e += field(0, 4, b) + field(ehsize, 2, b);                                             // flags, ehsize
  e += field(phentsize, 2, b) + field(l.sections_only ? 0 : 1, 2, b);                    // phentsize, phnum
  e += field(shentsize, 2, b) + field(l.sections_only ? 2 : 0, 2, b) + field(0, 2, b);   // shentsize, shnum, shstrndx
  REQUIRE(e.size() == ehsize);
  if (!l.sections_only) {
    if (l.is64)
      e += field(4, 4, b) + field(4, 4, b) + field(notes_at, 8, b) + field(0, 8, b) + field(0, 8, b) +
           field(l.notes.size(), 8, b) + field(l.notes.size(), 8, b) + field(l.note_align, 8, b);
    else
      e += field(4, 4, b) + field(notes_at, 4, b) + field(0, 4, b) + field(0, 4, b) + field(l.notes.size(), 4, b) +
           field(l.notes.size(), 4, b) + field(4, 4, b) + field(l.note_align, 4, b);
  }
  e += l.notes;
  if (l.sections_only) {
    e += std::string(shentsize, '\0');  // section 0 is null
    if (l.is64)
      e += field(0, 4, b) + field(7, 4, b) + field(2, 8, b) + field(0, 8, b) + field(notes_at, 8, b) +
           field(l.notes.size(), 8, b) + field(0, 4, b) + field(0, 4, b) + field(l.note_align, 8, b) + field(0, 8, b);
    else
      e += field(0, 4, b) + field(7, 4, b) + field(2, 4, b) + field(0, 4, b) + field(notes_at, 4, b) +
           field(l.notes.size(), 4, b) + field(0, 4, b) + field(0, 4, b) + field(l.note_align, 4, b) + field(0, 4, b);
  }
  return {e, notes_at};
}

const std::string kId =
    std::string("\x01\x23\x45\x67\x89\xab\xcd\xef\x10\x32\x54\x76\x98\xba\xdc\xfe\x00\x11\x22\x33", 20);
const std::string kIdHex = "0123456789abcdef1032547698badcfe00112233";

// Runs the probe as another host would (here, by /bin/sh) and reads its answer.
ProbeVerdict probe_here(const FileIdentity& local, const fs::path& dir) {
  write_file(dir / "probe.sh", identity_probe(local) + "\n");
  std::string out = shell_output("/bin/sh " + (dir / "probe.sh").string() + " 2>&1");
  REQUIRE(!out.empty());
  REQUIRE(out.find('\n') == out.size() - 1);  // exactly one line, nothing on stderr
  out.pop_back();
  return compare_probe(local, out);
}

}  // namespace

TEST_CASE("the build id of this test binary, as the loader and readelf see it", "[file_identity]") {
  auto id = elf_build_id("/proc/self/exe");
  REQUIRE(id.has_value());
  std::string loaded;
  dl_iterate_phdr(find_loaded_build_id, &loaded);
  REQUIRE(!loaded.empty());
  CHECK(id->hex == loaded);
  // The offset is where the bytes are in the file (what another host reads with od).
  const std::string file = read_file("/proc/self/exe");
  REQUIRE(id->offset + id->hex.size() / 2 <= file.size());
  CHECK(hex(reinterpret_cast<const unsigned char*>(file.data() + id->offset), id->hex.size() / 2) == id->hex);
  // (by its path: /proc/self/exe in readelf's command line would be readelf itself)
  const std::string readelf =
      shell_output("readelf -n '" + fs::read_symlink("/proc/self/exe").string() + "' 2>/dev/null");
  if (readelf.find("Build ID: ") != std::string::npos) {
    std::string line = readelf.substr(readelf.find("Build ID: ") + 10);
    CHECK(line.substr(0, line.find('\n')) == id->hex);
  } else {
    WARN("readelf is not installed: the build id was compared with the loader's copy only");
  }
  FileIdentity fi = identify_file("/proc/self/exe");
  CHECK(fi.ok());
  CHECK(fi.build_id.has_value());
  CHECK(fi.sha256.empty());  // an ELF file with a build id is not hashed
  CHECK(fi.size == file.size());
  CHECK(fi.describe() == "build id " + id->hex.substr(0, 12) + "...");
}

TEST_CASE("build ids in hand-made ELF layouts: 64/32-bit, either byte order, segments or sections", "[file_identity]") {
  TempDir dir;
  for (bool is64 : {true, false})
    for (bool big : {false, true})
      for (bool sections_only : {false, true}) {
        ElfLayout l{is64, big, sections_only, "", 4};
        // an ABI-tag note first, so the search must step over a note (odd name and desc sizes)
        l.notes = note("GNU", 1, std::string(16, '\x07'), big) + note("Go", 4, "abc", big) + note("GNU", 3, kId, big);
        auto [bytes, notes_at] = make_elf(l);
        const fs::path p = dir.path / "elf";
        write_file(p, bytes);
        INFO("is64 " << is64 << " big-endian " << big << " sections only " << sections_only);
        auto id = elf_build_id(p);
        REQUIRE(id.has_value());
        CHECK(id->hex == kIdHex);
        CHECK(bytes.substr(id->offset, kId.size()) == kId);
        CHECK(id->offset > notes_at);
      }
  // 8-aligned note segments (as .note.gnu.property's) pad names and descriptors to 8 bytes.
  ElfLayout l8{true, false, false, note("GNU", 5, std::string(12, '\x01'), false, 8) + note("GNU", 3, kId, false, 8),
               8};
  write_file(dir.path / "elf8", make_elf(l8).first);
  REQUIRE(elf_build_id(dir.path / "elf8").has_value());
  CHECK(elf_build_id(dir.path / "elf8")->hex == kIdHex);
}

TEST_CASE("files without a build id are identified by their SHA-256", "[file_identity]") {
  TempDir dir;
  // ELF with notes but no build id (linked with --build-id=none)
  write_file(dir.path / "noid", make_elf({true, false, false, note("GNU", 1, std::string(16, '\0'), false), 4}).first);
  CHECK_FALSE(elf_build_id(dir.path / "noid").has_value());
  FileIdentity fi = identify_file(dir.path / "noid");
  CHECK(fi.ok());
  CHECK_FALSE(fi.build_id.has_value());
  CHECK(fi.sha256.size() == 64);
  // a script
  write_file(dir.path / "train.py", "hello\n");
  CHECK_FALSE(elf_build_id(dir.path / "train.py").has_value());
  fi = identify_file(dir.path / "train.py");
  CHECK(fi.ok());
  CHECK(fi.size == 6);
  CHECK(fi.sha256 == "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03");
  CHECK(fi.describe() == "sha256 5891b5b522d5...");
  // truncated ELF headers and a note table pointing past the end are "no build id", not a crash
  write_file(dir.path / "short", std::string("\x7f"
                                             "ELF\x02\x01\x01",
                                             7));
  CHECK_FALSE(elf_build_id(dir.path / "short").has_value());
  auto [bytes, notes_at] = make_elf({true, false, false, note("GNU", 3, kId, false), 4});
  write_file(dir.path / "cut", bytes.substr(0, notes_at + 20));
  CHECK_FALSE(elf_build_id(dir.path / "cut").has_value());
  write_file(dir.path / "empty", "");
  CHECK(identify_file(dir.path / "empty").sha256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("missing files and directories have no identity", "[file_identity]") {
  TempDir dir;
  FileIdentity fi = identify_file(dir.path / "nope");
  CHECK_FALSE(fi.ok());
  CHECK(fi.problem == "does not exist");
  CHECK_THROWS_AS(elf_build_id(dir.path / "nope"), dscpp::Error);
  CHECK(identify_file(dir.path).problem == "is not a regular file");
}

TEST_CASE("the probe another host runs tells same from different, missing and unreadable", "[file_identity]") {
  TempDir dir;
  // An ELF file: same, then another build of the same size, then a truncated copy.
  const fs::path elf = dir.path / "dscpp";
  auto [bytes, notes_at] = make_elf({true, false, false, note("GNU", 3, kId, false), 4});
  bytes += std::string(4096, 'x');
  write_file(elf, bytes);
  FileIdentity local = identify_file(elf);
  REQUIRE(local.build_id.has_value());
  CHECK(probe_here(local, dir.path).kind == ProbeVerdict::same);
  std::string other = bytes;
  other[local.build_id->offset + 3] ^= 0x40;
  write_file(elf, other);
  ProbeVerdict v = probe_here(local, dir.path);
  CHECK(v.kind == ProbeVerdict::different);
  CHECK(v.detail == "build id 0123456789ab... here, not there");
  write_file(elf, bytes.substr(0, bytes.size() - 100));
  v = probe_here(local, dir.path);
  CHECK(v.kind == ProbeVerdict::different);
  CHECK(v.detail == std::to_string(bytes.size() - 100) + " bytes there, " + std::to_string(bytes.size()) + " here");
  // shorter than the build id's offset: od reads nothing (and must not complain)
  write_file(elf, bytes.substr(0, 10));
  CHECK(probe_here(local, dir.path).kind == ProbeVerdict::different);
  write_file(elf, bytes);
  CHECK(probe_here(local, dir.path).kind == ProbeVerdict::same);

  // A script: any changed byte is a different file.
  const fs::path script = dir.path / "it's a script.py";  // quoting of the path
  write_file(script, "print('rank')\n");
  FileIdentity py = identify_file(script);
  REQUIRE(py.ok());
  CHECK(probe_here(py, dir.path).kind == ProbeVerdict::same);
  write_file(script, "print('RANK')\n");
  v = probe_here(py, dir.path);
  CHECK(v.kind == ProbeVerdict::different);
  CHECK(v.detail == py.describe() + " here, sha256 " + identify_file(script).sha256.substr(0, 12) + "... there");

  // Not there, a directory there, not readable there.
  fs::remove(script);
  CHECK(probe_here(py, dir.path).kind == ProbeVerdict::missing);
  fs::create_directory(script);
  CHECK(probe_here(py, dir.path).kind == ProbeVerdict::not_regular);
  fs::remove(script);
  fs::create_symlink(dir.path / "nowhere", script);  // a dangling symlink is missing too
  CHECK(probe_here(py, dir.path).kind == ProbeVerdict::missing);
  if (geteuid() != 0) {  // root reads everything
    fs::remove(script);
    write_file(script, "print('rank')\n");
    fs::permissions(script, fs::perms::none);
    CHECK(probe_here(py, dir.path).kind == ProbeVerdict::unreadable);
  }
}

TEST_CASE("answers that are not the probe's", "[file_identity]") {
  FileIdentity local;
  local.path = "/x";
  local.size = 6;
  local.sha256 = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";
  CHECK(compare_probe(local, "").kind == ProbeVerdict::no_answer);
  CHECK(compare_probe(local, "garbage").kind == ProbeVerdict::no_answer);
  CHECK(compare_probe(local, "6 " + local.sha256).kind == ProbeVerdict::same);
  CHECK(compare_probe(local, "6 " + local.sha256 + "\r").kind == ProbeVerdict::same);
  ProbeVerdict v = compare_probe(local, "6 ");  // sha256sum is not installed there
  CHECK(v.kind == ProbeVerdict::no_answer);
  CHECK(v.detail == "`sha256sum` printed nothing there (is it installed?)");
}

TEST_CASE("the check runs before the command, which starts only on `go` and keeps the rest of stdin",
          "[file_identity]") {
  TempDir dir;
  write_file(dir.path / "prog", "print('rank')\n");
  FileIdentity local = identify_file(dir.path / "prog");
  REQUIRE(local.ok());
  const std::string probed = std::to_string(local.size) + " " + local.sha256 + "\n";
  // The remote /bin/sh is dash on Debian and bash on RHEL: `read` must stop at the newline in
  // both, since the command keeps the channel (and on it, the EOF it stops on).
  std::vector<std::string> shells = {"/bin/sh"};
  if (access("/bin/bash", X_OK) == 0) shells.push_back("/bin/bash");
  for (const std::string& sh : shells) {
    INFO(sh);
    auto run = [&](const std::string& input) {
      const std::string line = gate_prefix(identity_probe(local)) + "echo started; cat";
      const fs::path err = dir.path / "err";
      std::string out = shell_output("printf '" + input + "' | " + sh + " -c " + shell_quote(line) + " 2>" +
                                     shell_quote(err.string()) + "; echo \"exit $?\"");
      return std::pair{out, read_file(err)};
    };
    auto [out, err] = run("go\\nrest of stdin\\n");
    CHECK(out == probed + "dscpp-check-done\nstarted\nrest of stdin\nexit 0\n");
    CHECK(err == "dscpp-check-done\n");
    for (const char* refusal : {"", "stop\\n", "go", "go now\\n"}) {  // EOF, another word, no newline
      INFO("stdin: " << refusal);
      std::tie(out, err) = run(refusal);
      CHECK(out == probed + "dscpp-check-done\nexit 0\n");
    }
  }
}
