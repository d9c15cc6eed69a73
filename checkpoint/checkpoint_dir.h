// The on-disk commit protocol of checkpoints, shared by every ZeRO stage.
//
// Layout (DeepSpeed's shape):  <save_dir>/latest            text file: the newest tag
//                              <save_dir>/<tag>/...         one directory per tag
// Every rank writes its files into a staging directory <save_dir>/.<tag>.partial/ (on the
// shared filesystem), the engine barriers, then rank 0 fsyncs the files, renames the staging
// directory to <tag> (replacing an older directory of that name only after the new one is
// complete) and finally rewrites `latest` through a temporary file and rename. A crash at any
// point leaves either the previous checkpoint or the new one visible, never a torn one.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dscpp::ckpt {

// Creates (if needed) <save_dir> and <save_dir>/.<tag>.partial/ and returns the staging path.
// Safe to call from every rank at once. A tag must be a plain directory name: not empty, no
// '/', no leading '.', not "latest". A staging dir left by a crashed save of the same tag is
// reused as is: rank 0 calls remove_stale_staging() before the ranks start a save.
std::string checkpoint_staging_dir(const std::string& save_dir, const std::string& tag);

// Rank 0, after every rank has written and closed its files: fsync each file and the
// directory, rename staging → <save_dir>/<tag>, fsync <save_dir>, then update `latest`.
// An existing <tag> is swapped out atomically (renameat2 RENAME_EXCHANGE) and then deleted;
// where the filesystem lacks that, it is first renamed to .<tag>.old (see below).
void commit_checkpoint(const std::string& save_dir, const std::string& tag);

// The tag `latest` names, or nullopt when there is no `latest` file. Throws dscpp::Error when
// `latest` names a directory that does not exist (naming both).
std::optional<std::string> read_latest_tag(const std::string& save_dir);

// The checkpoint directory --load_dir/--load_tag name: <load_dir>/<load_tag>, or the one `latest`
// names when load_tag is "". Throws naming what is missing, and for a tag that is not a
// checkpoint the tags there are.
std::string tag_dir_to_load(const std::string& load_dir, const std::string& load_tag);

// Removes leftover .<tag>.partial directories of crashed saves (returns what it removed).
// A .<tag>.old left by a replacement interrupted between its two renames is moved back to
// <tag> when <tag> is missing (so `latest` names a complete checkpoint again), else removed.
std::vector<std::string> remove_stale_staging(const std::string& save_dir);

// Writes `path` atomically: `path`.tmp, fsync, rename, fsync of the directory.
void write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace dscpp::ckpt
