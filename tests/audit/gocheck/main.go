// Command gocheck verifies a BlackOps receipt and consistency proof with Go's own
// golang.org/x/mod/sumdb/note and sumdb/tlog (an implementation nobody here wrote).
//
// Input (JSON on stdin): {"vkey", "note", "entry", "index", "path", "oldNote", "consistency"}.
// Output: one line per check, "ok <what>"; exit status 1 at the first failure.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type input struct {
	Vkey        string   `json:"vkey"`
	Note        string   `json:"note"`
	Entry       string   `json:"entry"`
	Index       int64    `json:"index"`
	Path        []string `json:"path"`
	OldNote     string   `json:"oldNote"`
	Consistency []string `json:"consistency"`
}

func fail(format string, args ...interface{}) {
	fmt.Printf("FAIL "+format+"\n", args...)
	os.Exit(1)
}

// checkpoint opens a signed note and reads its C2SP tlog-checkpoint body.
func checkpoint(text string, verifiers note.Verifiers) (string, int64, tlog.Hash) {
	n, err := note.Open([]byte(text), verifiers)
	if err != nil {
		fail("note.Open: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(n.Text, "\n"), "\n")
	if len(lines) < 3 {
		fail("checkpoint body has %d lines", len(lines))
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("tree size: %v", err)
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(raw) != tlog.HashSize {
		fail("root hash: %v", err)
	}
	var root tlog.Hash
	copy(root[:], raw)
	return lines[0], size, root
}

func hashes(lines []string) []tlog.Hash {
	out := make([]tlog.Hash, len(lines))
	for i, line := range lines {
		raw, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(raw) != tlog.HashSize {
			fail("proof hash %d: %v", i, err)
		}
		copy(out[i][:], raw)
	}
	return out
}

func main() {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("input: %v", err)
	}
	verifier, err := note.NewVerifier(in.Vkey)
	if err != nil {
		fail("note.NewVerifier: %v", err)
	}
	verifiers := note.VerifierList(verifier)
	origin, size, root := checkpoint(in.Note, verifiers)
	if origin != verifier.Name() {
		fail("origin %q is not the key name %q", origin, verifier.Name())
	}
	fmt.Printf("ok note signature (%s, size %d)\n", origin, size)
	leaf := tlog.RecordHash([]byte(in.Entry))
	if err := tlog.CheckRecord(tlog.RecordProof(hashes(in.Path)), size, root, in.Index, leaf); err != nil {
		fail("tlog.CheckRecord: %v", err)
	}
	fmt.Printf("ok inclusion of leaf %d\n", in.Index)
	if in.OldNote != "" {
		_, oldSize, oldRoot := checkpoint(in.OldNote, verifiers)
		proof := tlog.TreeProof(hashes(in.Consistency))
		if err := tlog.CheckTree(proof, size, root, oldSize, oldRoot); err != nil {
			fail("tlog.CheckTree: %v", err)
		}
		fmt.Printf("ok consistency %d -> %d\n", oldSize, size)
	}
}
