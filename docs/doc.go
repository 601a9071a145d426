// Package docs holds the project's documentation (the Markdown files beside
// this one) and, in its tests, the checks that keep rules.md true to the
// code: every rule ID the repository uses is defined there, every test it
// names as a proof exists, and every test named after a rule is listed under
// it. It has no code of its own.
package docs
