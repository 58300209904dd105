package config

import (
	"strings"
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCalendarPeriod: periods by the calendar of a zone, across month
// ends, 29 February and daylight-saving changes in two zones (and one a
// half hour off UTC).
func TestCalendarPeriod(t *testing.T) {
	paris, ny, kolkata := mustZone(t, "Europe/Paris"), mustZone(t, "America/New_York"), mustZone(t, "Asia/Kolkata")
	at := func(loc *time.Location, s string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	cases := []struct {
		name       string
		t          time.Time
		unit       Unit
		loc        *time.Location
		start, end string // in loc
		hours      float64
	}{
		{"last second of January", at(paris, "2026-01-31 23:59:59"), UnitMonth, paris, "2026-01-01 00:00:00", "2026-02-01 00:00:00", 31 * 24},
		{"first second of February", at(paris, "2026-02-01 00:00:00"), UnitMonth, paris, "2026-02-01 00:00:00", "2026-03-01 00:00:00", 28 * 24},
		{"a leap February", at(ny, "2028-02-29 12:00:00"), UnitMonth, ny, "2028-02-01 00:00:00", "2028-03-01 00:00:00", 29 * 24},
		{"29 February as a day", at(ny, "2028-02-29 23:30:00"), UnitDay, ny, "2028-02-29 00:00:00", "2028-03-01 00:00:00", 24},
		{"March in New York: one hour short", at(ny, "2026-03-20 10:00:00"), UnitMonth, ny, "2026-03-01 00:00:00", "2026-04-01 00:00:00", 31*24 - 1},
		{"the day clocks spring forward in New York", at(ny, "2026-03-08 12:00:00"), UnitDay, ny, "2026-03-08 00:00:00", "2026-03-09 00:00:00", 23},
		{"the day clocks fall back in Paris", at(paris, "2026-10-25 12:00:00"), UnitDay, paris, "2026-10-25 00:00:00", "2026-10-26 00:00:00", 25},
		{"a week over the change, from Monday", at(paris, "2026-10-28 09:00:00"), UnitWeek, paris, "2026-10-26 00:00:00", "2026-11-02 00:00:00", 7 * 24},
		{"the week of the change", at(paris, "2026-10-25 09:00:00"), UnitWeek, paris, "2026-10-19 00:00:00", "2026-10-26 00:00:00", 7*24 + 1},
		{"a year", at(paris, "2026-12-31 23:59:59"), UnitYear, paris, "2026-01-01 00:00:00", "2027-01-01 00:00:00", 365 * 24},
		{"an hour on the half hour in Kolkata", at(kolkata, "2026-05-01 10:45:00"), UnitHour, kolkata, "2026-05-01 10:00:00", "2026-05-01 11:00:00", 1},
	}
	for _, c := range cases {
		start, end := CalendarPeriod(c.t, c.unit, c.loc)
		const layout = "2006-01-02 15:04:05"
		if got := start.In(c.loc).Format(layout); got != c.start {
			t.Errorf("%s: start %s; want %s", c.name, got, c.start)
		}
		if got := end.In(c.loc).Format(layout); got != c.end {
			t.Errorf("%s: end %s; want %s", c.name, got, c.end)
		}
		if got := end.Sub(start).Hours(); got != c.hours {
			t.Errorf("%s: %v hours; want %v", c.name, got, c.hours)
		}
		if c.t.Before(start) || !c.t.Before(end) {
			t.Errorf("%s: %v outside [%v, %v)", c.name, c.t, start, end)
		}
	}
}

func TestCalendarParse(t *testing.T) {
	c := parseOne(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 10000, algorithm: fixed_window, calendar: Europe/Paris}\n")
	l := c.Match("d", []Entry{{"k", "x"}})
	if l == nil || l.RateLimit.Calendar == nil || l.RateLimit.Calendar.String() != "Europe/Paris" {
		t.Fatalf("calendar limit: %+v", l)
	}
	for _, bad := range []struct{ block, reason string }{
		{"{unit: month, requests_per_unit: 5, algorithm: fixed_window, calendar: Mars/Olympus}", "not a time zone"},
		{"{unit: month, requests_per_unit: 5, calendar: UTC}", "calendar applies to algorithm: fixed_window"},
		{"{unit: day, requests_per_unit: 5, algorithm: fixed_window, unit_multiplier: 2, calendar: UTC}", "no unit_multiplier"},
	} {
		_, err := Parse(map[string][]byte{"f.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + bad.block + "\n")})
		if err == nil || !strings.Contains(err.Error(), bad.reason) {
			t.Errorf("%s: %v; want an error containing %q", bad.block, err, bad.reason)
		}
	}
}
