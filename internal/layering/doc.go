// Package layering holds the tests that keep the repository's own rules:
// the import rule of docs/architecture.md (every project package has a row
// in its table and imports only the project packages that row lists; the
// table is the rule, the test only reads it), the kernel side building
// without the control plane (no dependency, direct or not, on agent, the
// shim, sim, bench or picker), a row in that table for nothing that is
// no longer a package, a package comment for every package, docs whose
// relative links lead somewhere, repository paths cited in docs and Go
// comments that exist, and nothing that cites a file outside the
// repository.
package layering
