package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Load reads a config file, or every config file in a directory, and parses
// them as Parse does. Errors name files by their path under path.
//
// A directory is read as Kubernetes mounts a ConfigMap: only its top level,
// only names ending in .yaml or .yml, skipping names that begin with "." (the
// "..data" symlink and the "..2026_01_02_..." directory it points to) and
// following symlinks to regular files (each key is a symlink into ..data).
// Reading the directory afresh on each reload therefore always sees one
// complete generation of the ConfigMap.
func Load(path string) (*Config, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	if !info.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("load config: %w", err)
		}
		return parse([]sourceFile{{name: path, hashName: filepath.Base(path), data: data}})
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	var files []sourceFile
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
		data, err := os.ReadFile(full)
		if err != nil {
			return nil, fmt.Errorf("load config: %w", err)
		}
		files = append(files, sourceFile{name: full, hashName: name, data: data})
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("load config: no config files in %s", path)
	}
	return parse(files)
}
