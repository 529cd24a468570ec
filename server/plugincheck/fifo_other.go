//go:build !unix

package plugincheck

import "errors"

// mkfifo has no equivalent here: the jsonl target needs a Unix system.
func mkfifo(string) error {
	return errors.New("named pipes need a Unix system; check a jsonl plugin on Linux or macOS")
}
