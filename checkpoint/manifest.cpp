#include "checkpoint/manifest.h"

#include "checkpoint/checkpoint_dir.h"
#include "core/error.h"

#include <sys/stat.h>

#include <fstream>

namespace dscpp::ckpt {

using nlohmann::json;

std::string rank_file_name(int rank) {
  return fmt::format("zero_pp_rank_{}_partitions.safetensors", rank);
}

std::string Manifest::path() const {
  return tag_dir + "/" + kManifestFile;
}

namespace {
// The value at a dotted key, or nullptr.
const json* lookup(const json& doc, const std::string& key) {
  const json* j = &doc;
  for (size_t pos = 0;;) {
    size_t dot = key.find('.', pos);
    std::string part = key.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    if (!j->is_object() || !j->contains(part)) return nullptr;
    j = &(*j)[part];
    if (dot == std::string::npos) return j;
    pos = dot + 1;
  }
}
}  // namespace

bool Manifest::has(const std::string& key) const {
  return lookup(doc, key) != nullptr;
}

const json& Manifest::at(const std::string& key) const {
  const json* j = lookup(doc, key);
  if (!j) fail("checkpoint {}: {} has no '{}'", tag_dir, kManifestFile, key);
  return *j;
}

void Manifest::throw_bad_type(const std::string& key, const json& v) const {
  fail("checkpoint {}: {}: '{}' has the wrong type ({} is a {})", tag_dir, kManifestFile, key, v.dump(), v.type_name());
}

json manifest_json(const Manifest& m) {
  json groups = json::array(), params = json::array();
  for (const GroupDesc& g : m.layout.groups)
    groups.push_back({{"first_layer", g.first_layer},
                      {"end_layer", g.end_layer},
                      {"begin", g.begin},
                      {"numel", g.numel},
                      {"part", g.part},
                      {"part_offset", g.part_offset}});
  for (const ParamDesc& p : m.layout.params)
    params.push_back({{"name", p.name}, {"shape", p.shape}, {"numel", p.numel}, {"offset", p.offset}});
  json j = m.doc.is_object() ? m.doc : json::object();
  j["format"] = "dscpp-checkpoint";
  j["format_version"] = kFormatVersion;
  j["zero_stage"] = m.zero_stage;
  j["world_size"] = m.world_size;
  j["params_dtype"] = m.params_dtype;
  j["global_steps"] = m.global_steps;
  j["optimizer"]["type"] = m.optimizer_type;
  j["optimizer"]["states"] = m.optimizer_states;
  j["optimizer"]["step"] = m.optimizer_step;
  j["layout"] = {{"parts", m.layout.parts},
                 {"total", m.layout.total},
                 {"part_total", m.layout.part_total},
                 {"groups", groups},
                 {"params", params}};
  j["files"] = {{"storage", m.storage == Storage::by_name ? "by_name" : "partitions"}, {"names", m.files}};
  if (!m.checksums.empty()) j["files"]["sha256"] = m.checksums;
  j.erase(kSelfDigest);  // a loaded document's own
  j[kSelfDigest] = sha256_hex(j.dump());
  return j;
}

Manifest read_manifest(const std::string& tag_dir) {
  Manifest m;
  m.tag_dir = tag_dir;
  std::ifstream in(m.path());
  if (!in)
    fail("checkpoint {}: {} is missing (not a dscpp checkpoint tag directory, or an unfinished save)", tag_dir,
         kManifestFile);
  try {
    m.doc = json::parse(in);
  } catch (const std::exception& e) {
    fail("checkpoint {}: {} is not valid JSON: {}", tag_dir, kManifestFile, e.what());
  }
  if (!m.doc.is_object()) fail("checkpoint {}: {} is not a JSON object", tag_dir, kManifestFile);
  if (m.doc.value("format", std::string()) != "dscpp-checkpoint")
    fail("checkpoint {}: {} has format '{}', expected 'dscpp-checkpoint'", tag_dir, kManifestFile,
         m.doc.value("format", std::string("?")));
  if (int v = m.get<int>("format_version"); v != kFormatVersion)
    fail("checkpoint {}: format version {}, this dscpp reads version {}{}", tag_dir, v, kFormatVersion,
         v < kFormatVersion ? " (written by an older dscpp: retrain or save it again with the version that wrote it)"
                            : " (written by a newer dscpp)");
  m.zero_stage = m.get<int>("zero_stage");
  m.world_size = m.get<int>("world_size");
  m.params_dtype = m.get<std::string>("params_dtype");
  m.global_steps = m.get<int64_t>("global_steps");
  m.optimizer_type = m.get<std::string>("optimizer.type");
  m.optimizer_states = m.get<std::vector<std::string>>("optimizer.states");
  m.optimizer_step = m.get<int64_t>("optimizer.step");
  if (m.zero_stage < 0 || m.zero_stage > 3 || m.world_size < 1)
    fail("checkpoint {}: {}: zero_stage {} / world_size {} out of range", tag_dir, kManifestFile, m.zero_stage,
         m.world_size);

  PartitionLayout& l = m.layout;
  l.parts = m.get<int>("layout.parts");
  l.total = m.get<int64_t>("layout.total");
  l.part_total = m.get<int64_t>("layout.part_total");
  const json& groups = m.at("layout.groups");
  const json& params = m.at("layout.params");
  if (!groups.is_array() || !params.is_array())
    fail("checkpoint {}: {}: layout.groups and layout.params must be arrays", tag_dir, kManifestFile);
  auto field = [&](const json& j, const char* key, const std::string& where) -> const json& {
    if (!j.is_object() || !j.contains(key))
      fail("checkpoint {}: {}: {} has no '{}'", tag_dir, kManifestFile, where, key);
    return j[key];
  };
  try {
    for (size_t i = 0; i < groups.size(); ++i) {
      std::string where = fmt::format("layout.groups[{}]", i);
      const json& g = groups[i];
      l.groups.push_back(GroupDesc{field(g, "first_layer", where).get<int>(), field(g, "end_layer", where).get<int>(),
                                   field(g, "begin", where).get<int64_t>(), field(g, "numel", where).get<int64_t>(),
                                   field(g, "part", where).get<int64_t>(),
                                   field(g, "part_offset", where).get<int64_t>()});
    }
    for (size_t i = 0; i < params.size(); ++i) {
      std::string where = fmt::format("layout.params[{}]", i);
      const json& p = params[i];
      l.params.push_back(ParamDesc{field(p, "name", where).get<std::string>(),
                                   field(p, "shape", where).get<std::vector<int64_t>>(),
                                   field(p, "numel", where).get<int64_t>(), field(p, "offset", where).get<int64_t>()});
    }
  } catch (const json::exception& e) {
    fail("checkpoint {}: {}: a layout entry has the wrong type: {}", tag_dir, kManifestFile, e.what());
  }
  validate(l, fmt::format("checkpoint {}: {}: layout", tag_dir, kManifestFile));
  if (m.zero_stage > 0 && l.parts != m.world_size)
    fail("checkpoint {}: {}: stage {} layout has {} parts but world_size is {}", tag_dir, kManifestFile, m.zero_stage,
         l.parts, m.world_size);

  std::string storage = m.get<std::string>("files.storage");
  m.files = m.get<std::vector<std::string>>("files.names");
  if (storage == "by_name") {
    m.storage = Storage::by_name;
    if (m.files.size() != 2 || l.parts != 1)
      fail("checkpoint {}: {}: by_name storage needs 2 files (model, optimizer) and a 1-part layout", tag_dir,
           kManifestFile);
  } else if (storage == "partitions") {
    m.storage = Storage::partitions;
    if (m.files.size() != static_cast<size_t>(l.parts))
      fail("checkpoint {}: {}: {} partition files listed for {} ranks", tag_dir, kManifestFile, m.files.size(),
           l.parts);
  } else {
    fail("checkpoint {}: {}: files.storage '{}' is neither 'by_name' nor 'partitions'", tag_dir, kManifestFile,
         storage);
  }
  for (const std::string& f : m.files)
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      fail("checkpoint {}: {}: file name '{}' is not a plain name inside the tag directory", tag_dir, kManifestFile, f);
  if (m.has("files.sha256")) {
    try {
      m.checksums = m.at("files.sha256").get<std::map<std::string, FileDigests>>();
    } catch (const json::exception&) {
      fail("checkpoint {}: {}: files.sha256 must map file names to {{part: hex digest}} objects", tag_dir,
           kManifestFile);
    }
    for (const std::string& f : m.files)
      if (!m.checksums.count(f))
        fail("checkpoint {}: {}: files.sha256 has no digests for {}", tag_dir, kManifestFile, f);
  }
  // Last, so that a structural error above names what is wrong: any other change since save
  // (a value edited or a flipped digit that still parses) shows here.
  if (m.doc.contains(kSelfDigest)) {
    json rest = m.doc;
    rest.erase(kSelfDigest);
    if (!m.doc[kSelfDigest].is_string() || m.doc[kSelfDigest].get<std::string>() != sha256_hex(rest.dump()))
      fail("checkpoint {} is damaged: {} was changed after it was saved (its {} does not match its contents)", tag_dir,
           kManifestFile, kSelfDigest);
  }
  return m;
}

std::string verify_file(const Manifest& m, const std::string& file) {
  auto digests = m.checksums.find(file);
  if (digests == m.checksums.end()) return "";
  const std::string problem = verify_digests(m.tag_dir + "/" + file, digests->second);
  return problem.empty() ? "" : fmt::format("checkpoint {} is damaged: {}", m.tag_dir, problem);
}

std::string resolve_tag_dir(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail("checkpoint {}: no such directory", path);
  if (::stat((path + "/" + kManifestFile).c_str(), &st) == 0) return path;
  auto tag = read_latest_tag(path);
  if (!tag)
    fail("checkpoint {}: neither a tag directory (no {}) nor a save directory (no `latest` file)", path, kManifestFile);
  return path + "/" + *tag;
}

}  // namespace dscpp::ckpt
