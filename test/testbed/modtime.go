package testbed

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// SetModTimes sets the modification times of objects of the store's
// bucket (key to time): what S3 lists as their LastModified, which S3
// itself always sets to the time of the upload. A test of what deletes
// objects by age (zalando's logical backup retention) makes old objects
// with it. The objects must exist and share one directory (prefix).
//
// weed's shell saves the directory's entries (fs.meta.save), their
// mtimes are rewritten, and the shell loads them back (fs.meta.load,
// which updates the entries in place, their chunks and metadata kept).
func (s *ObjectStore) SetModTimes(ctx context.Context, bucket string, times map[string]time.Time) error {
	dir := ""
	for key := range times {
		d := path.Dir("/buckets/" + bucket + "/" + key)
		if dir != "" && d != dir {
			return fmt.Errorf("objects in two directories, %s and %s", dir, d)
		}
		dir = d
	}
	if dir == "" {
		return nil
	}
	tmp, err := os.MkdirTemp(s.Dir, "meta-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	saved, loaded := filepath.Join(tmp, "saved.meta"), filepath.Join(tmp, "edited.meta")
	if _, err := s.Shell(ctx, fmt.Sprintf("fs.meta.save -o=%s %s", saved, dir)); err != nil {
		return err
	}
	data, err := os.ReadFile(saved)
	if err != nil {
		return err
	}
	var out []byte
	left := map[string]time.Time{}
	for key, t := range times {
		left["/buckets/"+bucket+"/"+key] = t
	}
	for len(data) > 0 {
		if len(data) < 4 {
			return errors.New("fs.meta.save's file: a truncated record")
		}
		n := binary.BigEndian.Uint32(data)
		if uint32(len(data)-4) < n {
			return errors.New("fs.meta.save's file: a truncated record")
		}
		rec := data[4 : 4+n]
		data = data[4+n:]
		name, err := fullEntryPath(rec)
		if err != nil {
			return err
		}
		t, ok := left[name]
		if !ok {
			continue
		}
		delete(left, name)
		rec, err = withMtime(rec, t.Unix())
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		out = binary.BigEndian.AppendUint32(out, uint32(len(rec)))
		out = append(out, rec...)
	}
	for name := range left {
		return fmt.Errorf("%s: not in the store", name)
	}
	if err := os.WriteFile(loaded, out, 0o600); err != nil {
		return err
	}
	_, err = s.Shell(ctx, "fs.meta.load -v=false "+loaded)
	return err
}

// The fields of weed's filer.proto that SetModTimes reads and writes.
const (
	fullEntryDir   = 1 // FullEntry.dir
	fullEntryEntry = 2 // FullEntry.entry
	entryName      = 1 // Entry.name
	entryAttrs     = 4 // Entry.attributes
	attrsMtime     = 2 // FuseAttributes.mtime, unix seconds
)

// fullEntryPath returns the path of a FullEntry: its dir and its entry's
// name.
func fullEntryPath(rec []byte) (string, error) {
	var dir, name string
	err := eachField(rec, func(num protowire.Number, typ protowire.Type, v []byte) {
		switch {
		case num == fullEntryDir && typ == protowire.BytesType:
			dir = string(v)
		case num == fullEntryEntry && typ == protowire.BytesType:
			_ = eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) {
				if num == entryName && typ == protowire.BytesType {
					name = string(v)
				}
			})
		}
	})
	return path.Join(dir, name), err
}

// withMtime returns the FullEntry rec with its entry's attributes' mtime
// set to mtime, its other fields as they were.
func withMtime(rec []byte, mtime int64) ([]byte, error) {
	return rewrite(rec, fullEntryEntry, func(entry []byte) ([]byte, error) {
		return rewrite(entry, entryAttrs, func(attrs []byte) ([]byte, error) {
			var out []byte
			err := eachField(attrs, func(num protowire.Number, typ protowire.Type, v []byte) {
				if num != attrsMtime {
					out = appendField(out, num, typ, v)
				}
			})
			out = protowire.AppendTag(out, attrsMtime, protowire.VarintType)
			return protowire.AppendVarint(out, uint64(mtime)), err
		})
	})
}

// rewrite returns msg with the embedded message of field num replaced by
// what change makes of it; the field must be there.
func rewrite(msg []byte, num protowire.Number, change func([]byte) ([]byte, error)) ([]byte, error) {
	var out []byte
	found := false
	var changeErr error
	err := eachField(msg, func(n protowire.Number, typ protowire.Type, v []byte) {
		if n == num && typ == protowire.BytesType && !found {
			found = true
			v, changeErr = change(v)
		}
		out = appendField(out, n, typ, v)
	})
	switch {
	case err != nil:
		return nil, err
	case changeErr != nil:
		return nil, changeErr
	case !found:
		return nil, fmt.Errorf("no field %d", num)
	}
	return out, nil
}

// eachField calls f with each field of msg: its number, type and value
// (a varint's or fixed value's encoding, a length-delimited one's bytes).
func eachField(msg []byte, f func(protowire.Number, protowire.Type, []byte)) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			b, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return protowire.ParseError(m)
			}
			v, n = b, m
		default:
			m := protowire.ConsumeFieldValue(num, typ, msg)
			if m < 0 {
				return protowire.ParseError(m)
			}
			v, n = msg[:m], m
		}
		f(num, typ, v)
		msg = msg[n:]
	}
	return nil
}

// appendField appends a field as eachField gave it.
func appendField(out []byte, num protowire.Number, typ protowire.Type, v []byte) []byte {
	out = protowire.AppendTag(out, num, typ)
	if typ == protowire.BytesType {
		return protowire.AppendBytes(out, v)
	}
	return append(out, v...)
}
