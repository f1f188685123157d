// Package e2e holds end-to-end tests of the control plane: a real server
// over real HTTP and SQLite, driven through the typed client and raw
// requests, and crash tests that SIGKILL real server processes.
package e2e
