package patroni

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// ConfigPatch returns the minimal PATCH /config body that makes current
// (the dynamic configuration, as Config returns it) hold desired for the
// keys desired names, and nil when nothing differs. Keys of current that
// desired does not name are left alone: they are the user's or Patroni's.
//
// desired holds top-level keys (ttl, loop_wait, retry_timeout,
// maximum_lag_on_failover, synchronous_mode, ...) and
// "postgresql": {"parameters": {name: value}}, values given as strings;
// nested objects are compared key by key, as Patroni merges them. A nil
// value in desired means the key should be absent. remove lists
// postgresql.parameters names to delete: each is sent as null when current
// has it and desired does not set it (a name in both is kept).
//
// desired's "slots", when it is an object, is all of Patroni's permanent
// slots: a slot current has and desired does not is sent as null, and so
// is an option of a slot that desired's slot lacks (Patroni merges a patch
// into what it holds, so only a null removes).
//
// Values compare as Patroni and PostgreSQL would apply them, so that a
// configuration already in place gives no patch:
//  1. numbers by value: current's JSON float64 100 equals desired 100 and
//     "100", but a string against a string is compared exactly ("100" is
//     not "100.0");
//  2. booleans exactly, and a boolean against a string by PostgreSQL's
//     reading of the string (true equals "on", "true", "yes", "1");
//  3. strings exactly, lists element by element.
//
// A difference this reports that Patroni would not apply would send the
// same patch forever; Patroni compares str() of the two values, so every
// pair it deems equal is equal here too.
func ConfigPatch(current, desired map[string]any, remove []string) map[string]any {
	patch := configDiff(current, desired)
	if slots, ok := desired["slots"].(map[string]any); ok {
		patch = pruneAbsent(patch, "slots", current["slots"], slots, 2)
	}
	params, _ := lookup(current, "postgresql", "parameters").(map[string]any)
	wanted, _ := lookup(desired, "postgresql", "parameters").(map[string]any)
	for _, name := range remove {
		if _, keep := wanted[name]; keep || params[name] == nil {
			// Patroni ignores a null for a key it does not hold (or holds
			// as null): nothing to send.
			continue
		}
		if patch == nil {
			patch = map[string]any{}
		}
		pg, ok := patch["postgresql"].(map[string]any)
		if !ok {
			pg = map[string]any{}
			patch["postgresql"] = pg
		}
		ps, ok := pg["parameters"].(map[string]any)
		if !ok {
			ps = map[string]any{}
			pg["parameters"] = ps
		}
		ps[name] = nil
	}
	return patch
}

// pruneAbsent adds to patch, under key, a null for each key of have (an
// object) that want lacks, down depth levels of objects; it returns patch,
// made when nil.
func pruneAbsent(patch map[string]any, key string, have any, want map[string]any, depth int) map[string]any {
	haveMap, ok := have.(map[string]any)
	if !ok || depth == 0 {
		return patch
	}
	for k, hv := range haveMap {
		wv, kept := want[k]
		sub, _ := patch[key].(map[string]any)
		switch wm, isMap := wv.(map[string]any); {
		case !kept:
			if hv == nil {
				continue
			}
			if sub == nil {
				sub = map[string]any{}
			}
			sub[k] = nil
		case isMap:
			sub = pruneAbsent(sub, k, hv, wm, depth-1)
		}
		if sub != nil {
			if patch == nil {
				patch = map[string]any{}
			}
			patch[key] = sub
		}
	}
	return patch
}

// configDiff returns the keys of desired whose values current lacks or
// holds otherwise, recursing into objects the way Patroni's patch_config
// merges them; nil when nothing differs. current may be nil.
func configDiff(current, desired map[string]any) map[string]any {
	var patch map[string]any
	set := func(k string, v any) {
		if patch == nil {
			patch = map[string]any{}
		}
		patch[k] = v
	}
	for k, want := range desired {
		have := current[k]
		switch want := want.(type) {
		case nil:
			if have != nil {
				set(k, nil)
			}
		case map[string]any:
			haveMap, isMap := have.(map[string]any)
			sub := configDiff(haveMap, want)
			switch {
			case have != nil && !isMap:
				// Patroni replaces a scalar with the object as sent.
				if sub == nil {
					sub = map[string]any{}
				}
				set(k, sub)
			case sub != nil:
				set(k, sub)
			}
		default:
			if have == nil || !valuesEqual(have, want) {
				set(k, want)
			}
		}
	}
	return patch
}

// lookup returns the value at path in m, nil when any step is missing or
// not an object.
func lookup(m map[string]any, path ...string) any {
	var v any = m
	for _, k := range path {
		o, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = o[k]
	}
	return v
}

// valuesEqual tells whether Patroni would leave have in place when sent
// want; see ConfigPatch for the rules.
func valuesEqual(have, want any) bool {
	hs, hIsString := have.(string)
	ws, wIsString := want.(string)
	if hIsString && wIsString {
		return hs == ws
	}
	if hn, ok := number(have); ok {
		wn, ok := number(want)
		return ok && hn == wn
	}
	if hb, ok := have.(bool); ok {
		wb, ok := boolean(want)
		return ok && hb == wb
	}
	if ha, ok := have.([]any); ok {
		wv := reflect.ValueOf(want)
		if wv.Kind() != reflect.Slice || wv.Len() != len(ha) {
			return false
		}
		for i := range ha {
			if !valuesEqual(ha[i], wv.Index(i).Interface()) {
				return false
			}
		}
		return true
	}
	if hm, ok := have.(map[string]any); ok {
		wm, ok := want.(map[string]any)
		if !ok || len(hm) != len(wm) {
			return false
		}
		for k, hv := range hm {
			wv, ok := wm[k]
			if !ok || !valuesEqual(hv, wv) {
				return false
			}
		}
		return true
	}
	if hIsString {
		// want is not a string: compare from its side.
		return valuesEqual(want, have)
	}
	return reflect.DeepEqual(have, want)
}

// number returns v as a float64 when it is a Go number, a json.Number or
// a string that is a finite number, which is how PostgreSQL and Patroni
// read numeric settings given as strings.
func number(v any) (float64, bool) {
	var f float64
	switch v := v.(type) {
	case float64:
		f = v
	case float32:
		f = float64(v)
	case int:
		f = float64(v)
	case int8:
		f = float64(v)
	case int16:
		f = float64(v)
	case int32:
		f = float64(v)
	case int64:
		f = float64(v)
	case uint:
		f = float64(v)
	case uint8:
		f = float64(v)
	case uint16:
		f = float64(v)
	case uint32:
		f = float64(v)
	case uint64:
		f = float64(v)
	case json.Number:
		return number(string(v))
	case string:
		// ParseFloat also reads "Inf", "NaN" and hex floats; only plain
		// decimals are numbers here.
		if v == "" || strings.ContainsAny(v, "xXnN_") {
			return 0, false
		}
		var err error
		if f, err = strconv.ParseFloat(v, 64); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	return f, !math.IsInf(f, 0) && !math.IsNaN(f)
}

// boolean returns v as a bool when it is one, or a string PostgreSQL reads
// as one (Patroni's parse_bool).
func boolean(v any) (bool, bool) {
	switch v := v.(type) {
	case bool:
		return v, true
	case string:
		switch strings.ToLower(v) {
		case "on", "true", "yes", "1":
			return true, true
		case "off", "false", "no", "0":
			return false, true
		}
	}
	return false, false
}
