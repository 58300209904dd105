package config

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Load reads a config file, or every config file in a directory, and parses
// them as Parse does, within the default SizeBounds: LoadWith(path,
// SizeBounds{}).
func Load(path string) (*Config, error) { return LoadWith(path, SizeBounds{}) }

// LoadWith reads a config file, or every config file in a directory, and
// parses them as Parse does. Errors name files by their path under path.
//
// Sizes are checked before anything is read: a file larger than
// b.MaxFileBytes, a directory whose files add up to more than
// b.MaxTotalBytes or that holds more than MaxFiles of them, and a path that
// is not a regular file or a directory are refused, and each read is
// limited to what the bounds leave, so a file that grows meanwhile is
// refused too, never read whole.
//
// A directory is read as Kubernetes mounts a ConfigMap: only its top level,
// only names ending in .yaml or .yml, skipping names that begin with "." (the
// "..data" symlink and the "..2026_01_02_..." directory it points to) and
// following symlinks to regular files (each key is a symlink into ..data).
// Reading the directory afresh on each reload therefore always sees one
// complete generation of the ConfigMap.
func LoadWith(path string, b SizeBounds) (*Config, error) {
	b = b.WithDefaults()
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	if !info.IsDir() {
		if !info.Mode().IsRegular() {
			return nil, fmt.Errorf("load config: %s is not a regular file", path)
		}
		if info.Size() > b.MaxFileBytes {
			return nil, tooLarge(path, info.Size(), b.MaxFileBytes)
		}
		data, err := readBounded(path, b.MaxFileBytes)
		if err != nil {
			return nil, err
		}
		return parse([]sourceFile{{name: path, hashName: filepath.Base(path), data: data}})
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	var files []sourceFile
	var total int64
	for _, e := range entries {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		full := filepath.Join(path, name)
		info, err := os.Stat(full) // follows symlinks, unlike e.Type()
		if err != nil {
			return nil, fmt.Errorf("load config: %w", err)
		}
		if !info.Mode().IsRegular() {
			continue
		}
		if len(files) == MaxFiles {
			return nil, fmt.Errorf("load config: %s holds more than %d config files", path, MaxFiles)
		}
		if info.Size() > b.MaxFileBytes {
			return nil, tooLarge(full, info.Size(), b.MaxFileBytes)
		}
		total += info.Size()
		files = append(files, sourceFile{name: full, hashName: name})
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("load config: no config files in %s", path)
	}
	if total > b.MaxTotalBytes {
		return nil, fmt.Errorf("load config: the config files in %s add up to %d bytes, more than the bound of %d", path, total, b.MaxTotalBytes)
	}
	left := b.MaxTotalBytes
	for i := range files {
		if files[i].data, err = readBounded(files[i].name, min(b.MaxFileBytes, left)); err != nil {
			return nil, err
		}
		left -= int64(len(files[i].data))
	}
	return parse(files)
}

func tooLarge(path string, size, bound int64) error {
	return fmt.Errorf("load config: %s is %d bytes, more than the bound of %d", path, size, bound)
}

// readBounded reads a file of at most bound bytes, never more than one
// byte past it: a file that grew since it was measured is refused.
func readBounded(path string, bound int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, bound+1))
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	if int64(len(data)) > bound {
		return nil, fmt.Errorf("load config: %s grew past the bound of %d bytes while being read", path, bound)
	}
	return data, nil
}
