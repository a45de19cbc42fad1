// Package deploy's tests check the files that deploy chunkup outside Go: the compose
// file at the repository's root, and (deploy/grafana) the Grafana dashboard.
package deploy

import (
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v2"
)

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		DependsOn map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// TestComposeFile: docker-compose.yml parses, names no MinIO image (MinIO's are no
// longer published: issue 27), every dependency is a service and one waited for as healthy has a healthcheck,
// every named volume is declared, and chunkup is pointed at the compose file's S3
// store with the keys that store is given. When a compose client is installed,
// `docker compose config` (or `docker-compose config`) must accept the file too.
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"redis", "s3", "kafka", "chunkup"} {
		if _, ok := f.Services[name]; !ok {
			t.Errorf("no service %q", name)
		}
	}
	for name, s := range f.Services {
		img := strings.ToLower(s.Image)
		if strings.Contains(img, "minio") || strings.HasSuffix(strings.SplitN(img, ":", 2)[0], "/mc") {
			t.Errorf("service %s uses the image %s: MinIO's images are no longer published", name, s.Image)
		}
		if s.Image == "" && s.Build == nil {
			t.Errorf("service %s has neither an image nor a build", name)
		}
		if s.Image != "" && !strings.Contains(s.Image, ":") {
			t.Errorf("service %s: image %s is not pinned to a tag", name, s.Image)
		}
		for dep, d := range s.DependsOn {
			ds, ok := f.Services[dep]
			switch {
			case !ok:
				t.Errorf("service %s depends on %s, which is not a service", name, dep)
			case d.Condition == "service_healthy" && ds.Healthcheck == nil:
				t.Errorf("service %s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				if _, ok := f.Volumes[src]; !ok {
					t.Errorf("service %s mounts volume %s, which is not declared", name, src)
				}
			}
		}
	}

	s3, chunkup := f.Services["s3"], f.Services["chunkup"]
	ep, err := url.Parse(chunkup.Environment["CHUNKUP_S3_ENDPOINT"])
	if err != nil || ep.Hostname() != "s3" {
		t.Errorf("chunkup's CHUNKUP_S3_ENDPOINT %q is not the s3 service", chunkup.Environment["CHUNKUP_S3_ENDPOINT"])
	} else if port := ep.Port(); !slices.Contains(s3.Command, "-s3.port="+port) {
		t.Errorf("chunkup's S3 endpoint port %s is not the one the s3 service's command sets (%q)", port, s3.Command)
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if chunkup.Environment[k] == "" || chunkup.Environment[k] != s3.Environment[k] {
			t.Errorf("%s: chunkup has %q, the s3 service %q", k, chunkup.Environment[k], s3.Environment[k])
		}
	}
	if d, ok := chunkup.DependsOn["s3"]; !ok || d.Condition != "service_healthy" {
		t.Errorf("chunkup does not wait for the s3 service to be healthy")
	}

	composeConfig(t)
}

// composeConfig runs the compose client's own validation when one is installed.
func composeConfig(t *testing.T) {
	var cmd *exec.Cmd
	if _, err := exec.LookPath("docker"); err == nil && exec.Command("docker", "compose", "version").Run() == nil {
		cmd = exec.Command("docker", "compose", "-f", "../docker-compose.yml", "config", "--quiet")
	} else if _, err := exec.LookPath("docker-compose"); err == nil {
		cmd = exec.Command("docker-compose", "-f", "../docker-compose.yml", "config", "--quiet")
	} else {
		t.Log("no compose client installed: docker-compose.yml checked by this test only")
		return
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	} else {
		t.Logf("%s: valid", strings.Join(cmd.Args, " "))
	}
}
