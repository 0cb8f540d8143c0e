// Package layering holds the test that keeps the import rule of
// docs/architecture.md: every project package has a row in its table, and
// imports only the project packages that row lists. The table is the rule;
// this package only reads it.
package layering
