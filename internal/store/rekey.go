package store

import (
	"context"
	"fmt"
	"strings"
)

// rekeyPage is how many due entries compactJobIDs reads a call.
const rekeyPage = 512

// compactJobIDs is the step from layout 4 to 5: every job whose id is a
// UUID in canonical form moves to the id's compact key part (encJob). It
// walks each shard's due index, which names every job from enqueue to
// forget, and moves each job whole in one script (lua/job_rekey.lua): a
// failure leaves each job either moved or not, and a second run moves the
// rest. Members already compact, or of ids that are not UUIDs, stay.
func compactJobIDs(ctx context.Context, s *Store) error {
	for sh, prefix := range s.k.shards {
		cursor := uint64(0)
		for {
			page, err := s.c.Do(ctx, s.c.B().Zscan().Key(s.k.due(sh)).Cursor(cursor).Count(rekeyPage).Build()).AsScanEntry()
			if err != nil {
				return fmt.Errorf("shard %d: read the due index: %w", sh, err)
			}
			// ZSCAN answers member, score, member, score, ...
			for i := 0; i < len(page.Elements); i += 2 {
				m := page.Elements[i]
				eS, eJ, ok := strings.Cut(m, ":")
				if !ok || strings.HasPrefix(eJ, compactMark) {
					continue
				}
				id, err := dec("job id", eJ)
				if err != nil {
					return fmt.Errorf("shard %d: due entry %q: %w", sh, m, err)
				}
				to := encJob(id)
				if to == eJ {
					continue
				}
				if _, err := s.runInt(ctx, scJobRekey, []string{prefix + "j:" + m, prefix + "j:" + eS + ":" + to}, m, to); err != nil {
					return fmt.Errorf("shard %d: move job %q: %w", sh, m, err)
				}
			}
			if cursor = page.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}
