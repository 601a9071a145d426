// Package docs holds the project's documentation (the Markdown files beside
// this one) and, in its tests, the checks that keep it true to the code:
// rules.md (every rule ID the repository uses is defined there, every test
// it names as a proof exists, and every test named after a rule is listed
// under it), the layout table of architecture.md (every folder of the tree
// has its row), the relative links of the Markdown pages, and no tracker
// numbers anywhere in the repository. It has no code of its own.
package docs
