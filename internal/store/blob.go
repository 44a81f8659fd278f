package store

import (
	"fmt"
	"strconv"
)

// How a job record stores a blob, as lua/lib/blob.lua writes it: a blob of
// at most blobChunk bytes, or of more than blobWhole, is the field <name>
// itself; one in between is its length under the numbered field <base> and
// its blobChunk-byte slices, in order, under <base+1> .. <base+n>. The
// scripts read blobs with get_blob; Go reads two with plain commands, the
// claiming device (pendingPage, resultsGet) and the result (resultsGet),
// and TestPendingPageRowsMatchTheRecords and
// TestResultsGetRowsMatchTheRecords check them against a script's read of
// the whole record.
const (
	blobChunk      = 64
	blobWhole      = 4096
	blobBaseDevice = 200 // BASE.cd
	blobBaseResult = 400 // BASE.rs
)

// deviceGuess is how many device slices a plain read asks for with a
// record's other fields, as the scripts' get_blob(k, 'cd', 4) does: a device
// of up to 256 bytes (a real daemon's identity is about 220) costs no
// further read.
const deviceGuess = 4

// deviceHead appends to fields what a plain read asks for to get the
// device: cd (stored whole), its sliced length and its first deviceGuess
// slices; deviceFromHead reads them back.
func deviceHead(fields []string) []string {
	return blobFields(append(fields, "cd"), blobBaseDevice, 0, deviceGuess)
}

// deviceFromHead is the device a deviceHead read (head, its 2 + deviceGuess
// values) found: the device, or "" and how many slices a further read must
// ask for (0: there is no device).
func deviceFromHead(head []string) (string, int, error) {
	if head[0] != "" || head[1] == "" {
		return head[0], 0, nil
	}
	n, err := slicedLen(head[1])
	if err != nil {
		return "", 0, fmt.Errorf("device: %w", err)
	}
	if ns := blobSlices(n); ns > deviceGuess {
		return "", ns, nil
	}
	return concat(head[2 : 2+blobSlices(n)]), 0, nil
}

// slicedLen is a sliced blob's stored length, checked against the layout.
func slicedLen(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= blobChunk || n > blobWhole {
		return 0, fmt.Errorf("%w: sliced blob of length %q", ErrUnexpectedReply, v)
	}
	return n, nil
}

func concat(parts []string) string {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = append(b, p...)
	}
	return string(b)
}

// blobSlices is how many slices a blob of n bytes is stored in.
func blobSlices(n int) int { return (n + blobChunk - 1) / blobChunk }

// blobFields appends the numbered fields base+from .. base+to.
func blobFields(out []string, base, from, to int) []string {
	for i := from; i <= to; i++ {
		out = append(out, strconv.Itoa(base+i))
	}
	return out
}
