package config

// LoadEnv is Load with the environment given by lookup instead of the
// process's: deploy/kubernetes's checks load a ConfigMap's job file with the
// environment its container would have.
func LoadEnv(path string, lookup func(string) (string, bool)) (*Config, error) {
	return load(path, lookup)
}
