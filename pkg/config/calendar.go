package config

import (
	"errors"
	"fmt"
	"time"
)

// LoadZone is the time zone a calendar limit names: an IANA name such as
// Europe/Paris, or UTC, of at most MaxZoneBytes. "Local" and "" are
// refused: they are the process's own zone (its TZ), so replicas started
// in different zones would count different days and months for one limit.
// The error quotes at most MaxQuotedBytes of the name.
func LoadZone(name string) (*time.Location, error) {
	switch {
	case name == "":
		return nil, errors.New("calendar needs a time zone (an IANA name such as Europe/Paris, or UTC)")
	case name == "Local":
		return nil, errors.New(`calendar "Local" is the process's own time zone, which replicas need not share: name the zone (an IANA name such as Europe/Paris, or UTC)`)
	case len(name) > MaxZoneBytes:
		return nil, fmt.Errorf("calendar %s: a zone name is at most %d bytes", Quote(name), MaxZoneBytes)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("calendar %s: not a time zone (want an IANA name such as Europe/Paris, or UTC)", Quote(name))
	}
	return loc, nil
}

// CalendarPeriod is the period of unit holding t on loc's calendar: a
// month from the 1st at 00:00 to the next 1st, a day from midnight to
// midnight (23 or 25 hours across a daylight-saving change), a week from
// Monday (ISO 8601), a year from 1 January; an hour, a minute or a second
// by loc's clock (a zone half an hour off UTC has its hours on the half
// hour).
func CalendarPeriod(t time.Time, unit Unit, loc *time.Location) (start, end time.Time) {
	lt := t.In(loc)
	y, m, d := lt.Date()
	switch unit {
	case UnitSecond:
		start = lt.Truncate(time.Second)
		return start, start.Add(time.Second)
	case UnitMinute, UnitHour:
		// By elapsed time from loc's last whole minute or hour: wall
		// clocks repeat an hour when daylight saving ends.
		into := time.Duration(lt.Second())*time.Second + time.Duration(lt.Nanosecond())
		length := time.Minute
		if unit == UnitHour {
			into += time.Duration(lt.Minute()) * time.Minute
			length = time.Hour
		}
		start = lt.Add(-into)
		return start, start.Add(length)
	case UnitDay:
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case UnitWeek:
		back := (int(lt.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case UnitMonth:
		return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	case UnitYear:
		return time.Date(y, 1, 1, 0, 0, 0, 0, loc), time.Date(y+1, 1, 1, 0, 0, 0, 0, loc)
	}
	panic(fmt.Sprintf("config: unit %v", unit))
}
