package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// LoadOptions says where Load reads from.
type LoadOptions struct {
	// ConfigFile is the YAML file to read; empty means none. A --config
	// flag in Args wins over it.
	ConfigFile string
	// Environ is the environment, as os.Environ returns it; only FORMS_*
	// variables are read. Nil means an empty environment, so a test never
	// picks up the machine's: the server passes os.Environ().
	Environ []string
	// Args are the command-line arguments after the command's name.
	Args []string
	// Program names the command in --help; empty means "hymical serve".
	Program string
	// Output receives the --help text; nil means os.Stdout.
	Output io.Writer
	// GenerateAdminToken, when set, is called if no admin token is
	// configured anywhere and insecure dev mode is off, so that a server
	// started with no configuration at all still runs behind a token: the
	// caller shows the generated token once. Load adds a warning saying so.
	GenerateAdminToken func() (string, error)
}

// Load builds the configuration from Default, then the YAML file, then
// the FORMS_* environment, then the flags, each layer overriding the ones
// before it, and checks it. A key set to null in the file keeps its
// default.
//
// It returns warnings (each naming its key) for settings that are allowed
// but risky, and an *Error listing every problem when any key is unknown or
// any value breaks a rule; the Config is then the zero value. With --help
// in Args it writes the help text to Output and returns an error wrapping
// flag.ErrHelp. Nothing it returns holds a secret.
func Load(opts LoadOptions) (Config, []string, error) {
	r := newReport()
	all := fields()
	src := map[string]string{} // key → where its value came from, for messages

	flags, configPath, err := parseFlags(opts, all, r)
	if errors.Is(err, flag.ErrHelp) {
		out := opts.Output
		if out == nil {
			out = os.Stdout
		}
		if werr := writeHelp(out, opts.Program); werr != nil {
			return Config{}, nil, fmt.Errorf("writing --help: %w", werr)
		}
		return Config{}, nil, err
	}
	if err != nil {
		return Config{}, nil, err
	}

	k := koanf.New(".")
	path := opts.ConfigFile
	if configPath != "" {
		path = configPath
	}
	if path != "" {
		if err := loadFile(k, path, all, r, src); err != nil {
			return Config{}, nil, err
		}
	}
	loadEnv(k, opts.Environ, all, r, src)
	for _, f := range all {
		if v, ok := flags[f.key]; ok {
			if err := k.Set(f.key, v); err != nil {
				return Config{}, nil, fmt.Errorf("configuration: applying --%s: %w", f.key, err)
			}
			src[f.key] = "by --" + f.key
		}
	}

	cfg := Default()
	for _, f := range all {
		decodeField(k, f, &cfg, r, src)
	}
	if cfg.Plugins.Dir == "" && !r.bad["plugins.dir"] {
		dir, err := resolvePluginDir("")
		if err != nil {
			r.invalid("plugins.dir", "plugins.dir is empty, which means the directory of the running executable, but that cannot be found (%v): set plugins.dir", err)
		}
		cfg.Plugins.Dir = dir
	}
	if cfg.Server.AdminToken == "" && !cfg.Server.InsecureDevMode && opts.GenerateAdminToken != nil && !r.bad["server.admin_token"] {
		tok, err := opts.GenerateAdminToken()
		if err != nil {
			return Config{}, r.warnings, fmt.Errorf("configuration: generating an admin token: %w", err)
		}
		cfg.Server.AdminToken = Secret(tok)
		r.warn("server.admin_token is not set, so a random one was generated for this run and shown once; set FORMS_SERVER_ADMIN_TOKEN to keep one across restarts")
	}
	cfg.check(r, src)
	if err := r.err(); err != nil {
		return Config{}, r.warnings, err
	}
	return cfg, r.warnings, nil
}

// Validate checks a configuration built in code, with the rules Load
// applies, and returns its warnings.
func (c Config) Validate() ([]string, error) {
	r := newReport()
	c.check(r, nil)
	return r.warnings, r.err()
}

// resolvePluginDir turns an empty plugins.dir into the directory of the
// running executable.
func resolvePluginDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	return filepath.Dir(exe), nil
}

// flagValue records a flag's text; the loader reads it like an
// environment variable, so both accept exactly the same values.
type flagValue struct {
	set    map[string]string
	key    string
	isBool bool
}

func (v *flagValue) String() string { return "" }

func (v *flagValue) Set(s string) error {
	v.set[v.key] = s
	return nil
}

// IsBoolFlag lets --server.insecure_dev_mode stand alone for =true.
func (v *flagValue) IsBoolFlag() bool { return v.isBool }

// parseFlags reads Args: one flag per key that is not file-only, plus
// --config. It returns the flags that were given and the --config path.
func parseFlags(opts LoadOptions, fields []field, r *report) (map[string]string, string, error) {
	fset := flag.NewFlagSet(opts.Program, flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	fset.Usage = func() {}
	set := map[string]string{}
	configPath := fset.String("config", "", "the YAML config file to read")
	var names []string
	for _, f := range fields {
		if f.fileOnly {
			continue
		}
		fset.Var(&flagValue{set: set, key: f.key, isBool: f.kind == kindBool}, f.key, f.doc)
		names = append(names, f.key)
	}
	err := fset.Parse(opts.Args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, "", err
	}
	if err != nil {
		// The flag package's messages are reworded here: they name the
		// flag with one dash and, for bad syntax, echo the argument, which
		// may be a secret.
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
			r.unknown("--"+name, "--%s is not a flag%s: every key is a flag named like it, e.g. --worker.lease_seconds=60; run with --help for the list",
				showKey(name), suggest(name, append(names, "config")))
		} else if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
			r.invalid(name, "--%s needs a value: write --%s=VALUE", showKey(name), showKey(name))
		} else {
			r.invalid("flags", "a command-line argument is not a flag: write settings as --KEY=VALUE (the argument is not shown, in case it is a secret); run with --help for the list")
		}
		return nil, "", r.err()
	}
	if n := fset.NArg(); n > 0 {
		r.invalid("flags", "%d command-line argument(s) after the flags are not flags: write every setting as --KEY=VALUE (they are not shown, in case one is a secret)", n)
		return nil, "", r.err()
	}
	return set, *configPath, nil
}

// loadFile merges the YAML file into k, refusing keys that name no
// setting. A file that cannot be read or parsed stops the load.
func loadFile(k *koanf.Koanf, path string, fields []field, r *report, src map[string]string) error {
	kf := koanf.New(".")
	if err := kf.Load(file.Provider(path), yaml.Parser()); err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			return fmt.Errorf("configuration: reading the config file: %w; check the --config path", err)
		}
		return fmt.Errorf("configuration: config file %s is not valid YAML: %s; it must be a map of sections such as server: and worker:, with their keys indented beneath them", path, yamlMessage(err))
	}
	known := map[string]bool{}
	byKey := map[string]field{}
	var keys []string
	for _, f := range fields {
		known[f.key] = true
		byKey[f.key] = f
		keys = append(keys, f.key)
		if kf.Exists(f.key) {
			src[f.key] = "in config file " + path
		}
	}
	secs := map[string]bool{}
	for _, s := range sections() {
		secs[s.name] = true
	}
	for _, key := range kf.Keys() {
		if known[key] {
			if _, isMap := asMap(kf.Get(key)); isMap {
				r.invalid(key, "%s in config file %s %s", key, path, notAMap(byKey[key].kind))
			}
			continue
		}
		if parent, ok := underKnown(key, keys); ok {
			// A map where a value belongs. It is reported here, even when
			// the environment or a flag sets the key, because a file that
			// says something it cannot mean is wrong either way.
			if !r.bad[parent] {
				r.invalid(parent, "%s in config file %s %s", parent, path, notAMap(byKey[parent].kind))
			}
			continue
		}
		if secs[key] {
			if isEmpty(kf.Get(key)) {
				continue // an empty section, e.g. "worker:" with nothing under it
			}
			r.invalid(key, "%s in config file %s is a section, not a value: write its keys beneath it, indented (run with --help for them)", key, path)
			continue
		}
		r.unknown(key, "%s in config file %s is not a key%s: remove or rename it (run with --help for every key)", showKey(key), path, suggest(key, keys))
	}
	return k.Merge(kf)
}

// underKnown returns the known key that key is nested under, if any.
func underKnown(key string, known []string) (string, bool) {
	for _, k := range known {
		if strings.HasPrefix(key, k+".") {
			return k, true
		}
	}
	return "", false
}

// notAMap says what a key of kind k takes instead of the map it was given.
func notAMap(k kind) string {
	switch k {
	case kindPlugins:
		return "must be a list of plugin entries, each starting with \"- name: NAME\", not a map"
	case kindSecrets, kindDurations, kindPrefixes, kindStrings:
		return "must be a list, not a map: write a YAML list, or comma-separated text"
	}
	return "takes a single value, not a map"
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// loadEnv merges the FORMS_* variables of environ into k, through koanf's
// env provider; a FORMS_* variable that names no key is refused.
func loadEnv(k *koanf.Koanf, environ []string, fields []field, r *report, src map[string]string) {
	byEnv := map[string]field{}
	var names []string
	for _, f := range fields {
		byEnv[f.env] = f
		if !f.fileOnly {
			names = append(names, f.env)
		}
	}
	var unknown, fileOnly []string
	provider := env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			f, ok := byEnv[name]
			switch {
			case !ok:
				unknown = append(unknown, name)
				return "", nil
			case f.fileOnly:
				fileOnly = append(fileOnly, name)
				return "", nil
			}
			return f.key, value
		},
	})
	ke := koanf.New(".")
	// The env provider's Read cannot fail, and Load on a map only merges.
	_ = ke.Load(provider, nil)
	slices.Sort(unknown)
	for _, name := range slices.Compact(unknown) {
		r.unknown(name, "environment variable %s is not a setting%s: every FORMS_* variable must name a key, as FORMS_<SECTION>_<KEY>; remove or rename it (run with --help for the list)",
			showKey(name), suggest(name, names))
	}
	slices.Sort(fileOnly)
	for _, name := range slices.Compact(fileOnly) {
		f := byEnv[name]
		r.invalid(f.key, "environment variable %s cannot set %s, which is a list of entries: write it in the config file", name, f.key)
	}
	for _, f := range fields {
		if ke.Exists(f.key) {
			src[f.key] = "by " + f.env
		}
	}
	_ = k.Merge(ke) // merging plain maps does not fail
}

// showKey shows a key, variable or flag name from the outside: as it is
// when it looks like one, quoted (and cut short) when it does not.
func showKey(s string) string {
	if s == "" || len(s) > 80 {
		return quote(s)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return quote(s)
		}
	}
	return s
}

// yamlMessage is the YAML parser's error with any quoted content removed:
// the parser echoes the values it could not place, and one may be a secret.
func yamlMessage(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		if j := strings.Index(l, "invalid map key"); j >= 0 {
			l = l[:j] + "invalid map key (a key must be plain text)"
		}
		lines[i] = strings.TrimSpace(stripBackquoted(l))
	}
	var b strings.Builder
	for _, l := range lines {
		if l == "" {
			continue
		}
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteByte(' ')
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(l)
	}
	return b.String()
}

func stripBackquoted(s string) string {
	var b strings.Builder
	in := false
	for _, c := range s {
		if c == '`' {
			if !in {
				b.WriteString("`...")
			} else {
				b.WriteByte('`')
			}
			in = !in
			continue
		}
		if !in {
			b.WriteRune(c)
		}
	}
	return b.String()
}
