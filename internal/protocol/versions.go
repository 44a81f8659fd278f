package protocol

// Daemon versions: the update offer and the floor (wire.md §14.4).

import (
	"regexp"
	"strconv"
	"strings"
)

// UpdateOfferSince is the oldest daemon that may be sent updateTo.
const UpdateOfferSince = "0.1.0-alpha.83"

var (
	versionPattern = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$`)
	offerPattern   = regexp.MustCompile(`^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$`)
	allDigits      = regexp.MustCompile(`^\d+$`)
)

type parsedVersion struct {
	release [3]float64
	pre     []any // float64 or string
}

func parseVersion(v string) (parsedVersion, bool) {
	m := versionPattern.FindStringSubmatch(v)
	if m == nil {
		return parsedVersion{}, false
	}
	var p parsedVersion
	for i := range 3 {
		p.release[i] = jsDigits(m[i+1])
	}
	if m[4] != "" {
		for _, part := range strings.Split(m[4], ".") {
			if allDigits.MatchString(part) {
				p.pre = append(p.pre, jsDigits(part))
			} else {
				p.pre = append(p.pre, part)
			}
		}
	}
	return p, true
}

// jsDigits is Number() of an all-digit string (possibly huge: Infinity).
func jsDigits(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64) // ErrRange still yields ±Inf, as JS
	return f
}

// CompareVersions is compareVersions: -1, 0 or 1, and ok=false (undefined)
// when either side does not parse.
func CompareVersions(a, b string) (int, bool) {
	l, okL := parseVersion(a)
	r, okR := parseVersion(b)
	if !okL || !okR {
		return 0, false
	}
	for i := range 3 {
		if l.release[i] != r.release[i] {
			if l.release[i] < r.release[i] {
				return -1, true
			}
			return 1, true
		}
	}
	if len(l.pre) == 0 && len(r.pre) > 0 {
		return 1, true
	}
	if len(l.pre) > 0 && len(r.pre) == 0 {
		return -1, true
	}
	for i := 0; i < max(len(l.pre), len(r.pre)); i++ {
		if i >= len(l.pre) {
			return -1, true
		}
		if i >= len(r.pre) {
			return 1, true
		}
		lv, rv := l.pre[i], r.pre[i]
		if lv == rv {
			continue
		}
		ln, lNum := lv.(float64)
		rn, rNum := rv.(float64)
		switch {
		case lNum && rNum:
			if ln < rn {
				return -1, true
			}
			return 1, true
		case lNum:
			return -1, true
		case rNum:
			return 1, true
		}
		if LessUTF16(lv.(string), rv.(string)) {
			return -1, true
		}
		return 1, true
	}
	return 0, true
}

// BelowFloorCheck is checkDaemonFloor: the 426 refusal when floor is set
// (non-empty) and daemonVersion compares below it; nil otherwise, including
// for an unparsable version.
func BelowFloorCheck(daemonVersion, floor string) *Refusal {
	if floor == "" {
		return nil
	}
	order, ok := CompareVersions(daemonVersion, floor)
	if !ok || order >= 0 {
		return nil
	}
	return BelowFloor(daemonVersion, floor)
}

// UpdateOfferAllowed is updateOfferFor: whether heartbeat carries updateTo =
// offer for this daemonVersion. offer "" means no offer configured.
func UpdateOfferAllowed(offer, daemonVersion string) bool {
	if offer == "" || !offerPattern.MatchString(offer) {
		return false
	}
	order, ok := CompareVersions(daemonVersion, UpdateOfferSince)
	if !ok || order < 0 {
		return false
	}
	return daemonVersion != offer
}
