package pluginhost

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

// BinaryPrefix is how a plugin executable in Config.Dir is named:
// hymical-plugin-<name>, e.g. hymical-plugin-http.
const BinaryPrefix = "hymical-plugin-"

// validName is what a plugin name may look like: it ends up in file names,
// endpoint records and log lines.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// spec is one plugin to launch.
type spec struct {
	name string
	path string
	// args are what path is run with: a built-in transport's, or none.
	args []string
	// builtIn says path is the server's own executable serving the
	// transport (Config.BuiltIn).
	builtIn bool
	// sum is the SHA-256 pin from the config; nil when unpinned.
	sum      []byte
	settings map[string]string
}

// discover resolves the config into the plugins to launch, sorted by name:
// every configured plugin, found by its Path, in Dir or built in, every
// other executable in Dir named BinaryPrefix + name, and every other
// built-in transport. An executable in Dir wins over the built-in of its
// name (see BuiltIn), and the log says so.
func discover(cfg Config, logger *slog.Logger) ([]spec, error) {
	inDir, err := scanDir(cfg.Dir, logger)
	if err != nil {
		return nil, err
	}
	builtIn := map[string]bool{}
	if cfg.BuiltIn.Executable != "" {
		exe, err := checkExecutable(cfg.BuiltIn.Executable)
		if err != nil {
			return nil, fmt.Errorf("%w: the executable that serves the built-in transports: %w", ErrPluginNotFound, err)
		}
		cfg.BuiltIn.Executable = exe
		for _, name := range cfg.BuiltIn.Names {
			if !validName.MatchString(name) {
				return nil, fmt.Errorf("built-in transport %q is not a plugin name", name)
			}
			builtIn[name] = true
		}
	}
	fromBuiltIn := func(s *spec) {
		s.path, s.builtIn = cfg.BuiltIn.Executable, true
		if cfg.BuiltIn.Args != nil {
			s.args = cfg.BuiltIn.Args(s.name)
		}
	}
	overrides := func(name, path string) {
		if builtIn[name] {
			logger.Info("transport plugin overrides the built-in of the same name", "plugin", name, "path", path, "built_in", cfg.BuiltIn.Executable)
		}
	}
	var specs []spec
	seen := map[string]bool{}
	for i, pc := range cfg.Plugins {
		if !validName.MatchString(pc.Name) {
			return nil, fmt.Errorf("plugins[%d]: name %q is not a plugin name: use lowercase letters, digits, '-' and '_', starting with a letter or digit", i, pc.Name)
		}
		if seen[pc.Name] {
			return nil, fmt.Errorf("plugins[%d]: plugin %q is configured twice; keep one entry", i, pc.Name)
		}
		seen[pc.Name] = true
		s := spec{name: pc.Name, settings: pc.Settings}
		if pc.SHA256 != "" {
			sum, err := hex.DecodeString(strings.TrimSpace(pc.SHA256))
			if err != nil || len(sum) != 32 {
				return nil, fmt.Errorf("plugin %q: sha256 %q is not a SHA-256 sum; give the 64 hex digits that `sha256sum` prints for the binary", pc.Name, pc.SHA256)
			}
			s.sum = sum
		}
		switch {
		case pc.Path != "":
			path, err := checkExecutable(pc.Path)
			if err != nil {
				return nil, fmt.Errorf("%w: plugin %q: %w", ErrPluginNotFound, pc.Name, err)
			}
			s.path = path
			overrides(pc.Name, path)
		case inDir[pc.Name] != "":
			s.path = inDir[pc.Name]
			overrides(pc.Name, s.path)
		case builtIn[pc.Name]:
			fromBuiltIn(&s)
		case cfg.Dir == "":
			return nil, fmt.Errorf("%w: plugin %q has no path and no plugin directory is set; set its path or the plugin directory", ErrPluginNotFound, pc.Name)
		default:
			return nil, fmt.Errorf("%w: plugin %q is configured but there is no executable %s%s in %s; install it there or set its path",
				ErrPluginNotFound, pc.Name, BinaryPrefix, pc.Name, cfg.Dir)
		}
		specs = append(specs, s)
	}
	for name, path := range inDir {
		if !seen[name] {
			seen[name] = true
			specs = append(specs, spec{name: name, path: path})
			overrides(name, path)
		}
	}
	for name := range builtIn {
		if !seen[name] {
			s := spec{name: name}
			fromBuiltIn(&s)
			specs = append(specs, s)
		}
	}
	slices.SortFunc(specs, func(a, b spec) int { return strings.Compare(a.name, b.name) })
	return specs, nil
}

// scanDir finds the plugin executables in dir, by name. An empty dir means
// no directory is configured.
func scanDir(dir string, logger *slog.Logger) (map[string]string, error) {
	found := map[string]string{}
	if dir == "" {
		return found, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("plugin directory %s does not exist; create it and install %s<name> executables in it, or unset it", dir, BinaryPrefix)
	}
	if err != nil {
		return nil, fmt.Errorf("reading plugin directory: %w", err)
	}
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), BinaryPrefix)
		if !ok {
			continue
		}
		if runtime.GOOS == "windows" {
			name = strings.TrimSuffix(name, ".exe")
		}
		if !validName.MatchString(name) {
			logger.Warn("skipping plugin file: not a valid plugin name", "file", e.Name(), "dir", dir)
			continue
		}
		path, err := checkExecutable(filepath.Join(dir, e.Name()))
		if err != nil {
			logger.Warn("skipping plugin file", "file", e.Name(), "dir", dir, "error", err)
			continue
		}
		found[name] = path
	}
	return found, nil
}

// checkExecutable returns path made absolute if it names an executable
// regular file (following symlinks).
func checkExecutable(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err // names the path already
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable; chmod +x it", path)
	}
	return abs, nil
}
