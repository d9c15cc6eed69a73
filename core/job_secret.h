// The job's secret: what every rank proves to the rendezvous store, and the store to every rank
// (collectives/store_auth.h), so that only the job's own processes get in. dscpp makes one per
// launch and hands it to each rank in its environment; ranks started by something else (srun,
// mpirun, a script) read the one the user gives them. Never logged, never on a command line,
// never written to disk by dscpp (docs/security.md).
#pragma once

#include <optional>
#include <string>

namespace dscpp {

// The names the secret travels under, for messages and the launcher.
inline constexpr const char* kJobSecretVar = "DSCPP_JOB_SECRET";
inline constexpr const char* kJobSecretFileVar = "DSCPP_JOB_SECRET_FILE";
inline constexpr const char* kInsecureStoreVar = "DSCPP_INSECURE_STORE";

// Shorter secrets are refused: a person picks guessable ones, and the launcher's are 64.
inline constexpr size_t kMinJobSecretChars = 32;

struct JobSecret {
  std::string value;   // the text every side keys its proofs with
  std::string source;  // "DSCPP_JOB_SECRET" or "DSCPP_JOB_SECRET_FILE (/path)", for messages
};

// 32 bytes from the kernel's random source (getrandom), as 64 lowercase hex digits.
std::string make_job_secret();

// DSCPP_JOB_SECRET, else the contents of the file DSCPP_JOB_SECRET_FILE names (one line; a final
// newline is dropped); nullopt when neither is set. Throws dscpp::Error, naming the variable,
// for a secret shorter than kMinJobSecretChars or holding spaces or control characters, and for
// a file that is missing, not a regular file, not owned by this user or open to its group or
// others (anyone who can read it could join the job: chmod 600).
std::optional<JobSecret> job_secret_from_env();

// DSCPP_INSECURE_STORE: true for 1, false when unset or 0; throws for anything else.
bool insecure_store_from_env();

// The one message for a rank that has no secret and no opt-out, naming both variables.
std::string no_job_secret_message();

}  // namespace dscpp
