package policy

import (
	"fmt"
	"slices"

	"github.com/byollm/relay-go/internal/projection"
	"github.com/byollm/relay-go/internal/protocol"
)

// MaxDrift bounds the disagreements Check lists.
const MaxDrift = 50

// Check compares the policy with the projection and lists where they
// disagree, at most MaxDrift lines (the count says how many in all).
//
// The rule (deploy/docs/grants.md, "One source of truth"): the projection's consents and rosters are the
// routing filter, the policy is the authority, and both must say the same
// thing about who consented and who is on whose team. A consent the
// projection routes but the policy lacks means jobs are offered and then
// declined; a policy consent the projection does not route means jobs the
// authority would grant are never offered. Mappings and declared purposes
// live only in the policy, and are not compared.
//
// Compared: for every (site, person) either names, the projection's state
// (consentFor after revocations: live, paused or none) against the policy's
// (consented, paused or none); for every owner either names, the union of
// the projection's roster members against the policy's team.
func Check(d Document, f projection.Fixture) (drift []string, total int) {
	p := projection.New(f)
	add := func(format string, args ...any) {
		total++
		if len(drift) < MaxDrift {
			drift = append(drift, fmt.Sprintf(format, args...))
		}
	}
	state := func(paused bool) string {
		if paused {
			return "paused"
		}
		return "live"
	}

	policyConsent := make(map[string]Consent, len(d.Consents))
	for _, c := range d.Consents {
		policyConsent[pair(c.SiteID, c.User)] = c
	}
	asked := map[string]bool{}
	var pairs [][2]string
	for _, c := range f.Consents {
		k := pair(c.SiteID, c.Owner)
		if !asked[k] {
			asked[k] = true
			pairs = append(pairs, [2]string{c.SiteID, c.Owner})
		}
	}
	for _, c := range d.Consents {
		k := pair(c.SiteID, c.User)
		if !asked[k] {
			asked[k] = true
			pairs = append(pairs, [2]string{c.SiteID, c.User})
		}
	}
	for _, sp := range pairs {
		site, user := sp[0], sp[1]
		pc := p.ConsentFor(user, site)
		polc, inPolicy := policyConsent[pair(site, user)]
		switch {
		case pc == nil && inPolicy:
			add("consent of %q to site %q: the policy has it (%s), the projection does not (its jobs are never offered)", user, site, state(polc.Paused))
		case pc != nil && !inPolicy:
			add("consent of %q to site %q: the projection has it (%s), the policy does not (its jobs are offered, then declined not-consented)", user, site, state(pc.Paused))
		case pc != nil && pc.Paused != polc.Paused:
			add("consent of %q to site %q: the projection says %s, the policy says %s", user, site, state(pc.Paused), state(polc.Paused))
		}
	}

	rosters := map[string][]string{}
	var owners []string
	for _, r := range f.Rosters {
		if _, ok := rosters[r.Owner]; !ok {
			owners = append(owners, r.Owner)
		}
		rosters[r.Owner] = append(rosters[r.Owner], r.Members...)
	}
	teams := map[string][]string{}
	for _, t := range d.Teams {
		if _, ok := rosters[t.Owner]; !ok {
			if _, seen := teams[t.Owner]; !seen {
				owners = append(owners, t.Owner)
			}
		}
		teams[t.Owner] = append(teams[t.Owner], t.Members...)
	}
	for _, o := range owners {
		want, have := setOf(rosters[o]), setOf(teams[o])
		for _, u := range sortedKeys(want) {
			if !have[u] {
				add("team of %q: %q is on the projection's roster, not on the policy's team (their jobs are offered, then declined not-a-member)", o, u)
			}
		}
		for _, u := range sortedKeys(have) {
			if !want[u] {
				add("team of %q: %q is on the policy's team, not on the projection's roster (their jobs are never offered)", o, u)
			}
		}
	}
	return drift, total
}

func setOf(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, protocol.CompareUTF16)
	return out
}
