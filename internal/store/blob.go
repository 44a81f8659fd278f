package store

import "strconv"

// How a job record stores a blob, as lua/lib/blob.lua writes it: a blob of
// at most blobChunk bytes, or of more than blobWhole, is the field <name>
// itself; one in between is its length under the numbered field <base> and
// its blobChunk-byte slices, in order, under <base+1> .. <base+n>. The
// scripts read blobs with get_blob; on one node Go reads two, the claiming
// device (pendingPagePlain, resultsGetPlain) and the result
// (resultsGetPlain), and TestPendingPageMatchesTheScript and
// TestResultsGetMatchesTheScript hold the readers together.
const (
	blobChunk      = 64
	blobWhole      = 4096
	blobBaseDevice = 200 // BASE.cd
	blobBaseResult = 400 // BASE.rs
)

// blobSlices is how many slices a blob of n bytes is stored in.
func blobSlices(n int) int { return (n + blobChunk - 1) / blobChunk }

// blobFields appends the numbered fields base+from .. base+to.
func blobFields(out []string, base, from, to int) []string {
	for i := from; i <= to; i++ {
		out = append(out, strconv.Itoa(base+i))
	}
	return out
}
