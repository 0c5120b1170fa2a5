{
  description = "herdr-mcp: the local MCP runtime of a Herdr workstation";

  # nixpkgs pinned to one commit of nixos-unstable (2026-06-29; CPython 3.13 as python3), so a
  # build today and a build next year take the same packages. Move it on purpose: a commit that
  # `git ls-remote https://github.com/NixOS/nixpkgs nixos-unstable` names, then `nix flake check`.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/b5aa0fbd538984f6e3d201be0005b4463d8b09f8";

  outputs =
    { self, nixpkgs }:
    let
      # pyproject.toml [project].version (tests/test_flake.py checks they agree).
      version = "0.1.0";

      systems = [
        "x86_64-linux"
        "aarch64-linux"
        "x86_64-darwin"
        "aarch64-darwin"
      ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});

      # Pure-Python wheels taken from PyPI by sha256: the dependencies pyproject.toml pins with ==
      # (mcp, rfc8785, sigstore, tomli-w) at exactly that version, what those pin with == in turn
      # (mcp-types, httpcore2, sigstore-models, sigstore-rekor-types), and httpx2, which nixpkgs
      # does not carry. tests/test_flake.py checks the == pins against pyproject.toml.
      wheels = {
        mcp = {
          version = "2.3.0";
          url = "https://files.pythonhosted.org/packages/20/d7/4a2878f128df729db3ca04e71bfce26405cc2e0c9ebe19c592feeb4c61b9/mcp-2.3.0-py3-none-any.whl";
          hash = "sha256-3QxEwInRZFPorjGjh3oAVNeiMUyqqB9eBUG5sXNLI3c=";
        };
        mcp-types = {
          version = "2.3.0";
          url = "https://files.pythonhosted.org/packages/ce/48/32583066b155bb5d4507e7887dc88ee23118cc4de8e2a12870c49719e2a8/mcp_types-2.3.0-py3-none-any.whl";
          hash = "sha256-lo79va7fqwatrkDTeKNDlfEJDFkh1L48nN4oOq922R0=";
        };
        httpx2 = {
          version = "2.16.2";
          url = "https://files.pythonhosted.org/packages/77/de/8c4306a3d6aa2495111986addf33a9e561eff4c47552e4c4b9251160d0ad/httpx2-2.16.2-py3-none-any.whl";
          hash = "sha256-8FwTqt5MRdvxyQYGR6EFjwrK1iOY+tludBJp7bM9RvU=";
        };
        httpcore2 = {
          version = "2.16.2";
          url = "https://files.pythonhosted.org/packages/2a/e8/009c347feac27f8960605aa98d55ed263b5870dd4fd80b82fd1d00d5716c/httpcore2-2.16.2-py3-none-any.whl";
          hash = "sha256-FgUa4qQvd2AHVD8y3pNJoxeyPSy7ThRWtLrA6IuHQZo=";
        };
        sigstore = {
          version = "4.5.1";
          url = "https://files.pythonhosted.org/packages/e1/e7/23dc324a6a5f0c1d8da0dfd8f862b0e3ec88e0b1302fdffd34628cdd6bb2/sigstore-4.5.1-py3-none-any.whl";
          hash = "sha256-AuAAGXs0mA8dOCdB1vg8L+y8733r9zBPNqUlPzyJLNk=";
        };
        sigstore-models = {
          version = "0.0.6";
          url = "https://files.pythonhosted.org/packages/12/dc/7a19864a7bc9f43121ab459e12768ab0080590e3e1b60a29b2f2eb01fb85/sigstore_models-0.0.6-py3-none-any.whl";
          hash = "sha256-UgGmj019D4vsHi9DeOtkawhMUmCaTjHbjDhQlf/2iy4=";
        };
        sigstore-rekor-types = {
          version = "0.0.18";
          url = "https://files.pythonhosted.org/packages/45/7c/f0b4e19fd424df4cc964f5d454e1d814fd2dc3b386342e6040441024318f/sigstore_rekor_types-0.0.18-py3-none-any.whl";
          hash = "sha256-tivzjFsaYrwNf+DuUaBwnkkxHRN8eIDDKYgqj0stHXg=";
        };
        rfc8785 = {
          version = "0.1.4";
          url = "https://files.pythonhosted.org/packages/4d/78/119878110660b2ad709888c8a1614fce7e2fab39080ab960656dc8605bf6/rfc8785-0.1.4-py3-none-any.whl";
          hash = "sha256-Ug1pC0SOzwcDaRx24aNKJN3NT8W8QdWJy3xY7GUbzUg=";
        };
        tomli-w = {
          version = "1.2.0";
          url = "https://files.pythonhosted.org/packages/c7/18/c86eb8e0202e32dd3df50d43d7ff9854f8e0603945ff398974c1d91ac1ef/tomli_w-1.2.0-py3-none-any.whl";
          hash = "sha256-GIMGCY0BO2kfytwBGr1mcn08QUxXG7AbGhdLqMmDz5A=";
        };
      };

      # The wheels above as Python packages of `ps`. They stay out of the package set, so nothing
      # else in nixpkgs is rebuilt against them. The version ranges inside their metadata are not
      # enforced: nixpkgs decides the versions of the rest.
      vendoredFor =
        pkgs: ps:
        let
          wheel =
            pname: dependencies:
            ps.buildPythonPackage {
              inherit pname dependencies;
              inherit (wheels.${pname}) version;
              format = "wheel";
              src = pkgs.fetchurl { inherit (wheels.${pname}) url hash; };
              dontCheckRuntimeDeps = true;
            };
        in
        rec {
          mcp-types = wheel "mcp-types" [
            ps.pydantic
            ps.typing-extensions
          ];
          httpcore2 = wheel "httpcore2" [
            ps.anyio
            ps.h11
            ps.truststore
          ];
          httpx2 = wheel "httpx2" [
            httpcore2
            ps.anyio
            ps.idna
            ps.truststore
            ps.typing-extensions
          ];
          mcp = wheel "mcp" [
            mcp-types
            httpx2
            ps.anyio
            ps.cryptography
            ps.jsonschema
            ps.opentelemetry-api
            ps.pydantic
            ps.pyjwt
            ps.python-multipart
            ps.sse-starlette
            ps.starlette
            ps.typing-extensions
            ps.typing-inspection
            ps.uvicorn
          ];
          rfc8785 = wheel "rfc8785" [ ];
          tomli-w = wheel "tomli-w" [ ];
          sigstore-models = wheel "sigstore-models" [
            ps.pydantic
            ps.typing-extensions
          ];
          sigstore-rekor-types = wheel "sigstore-rekor-types" [
            ps.email-validator
            ps.pydantic
          ];
          sigstore = wheel "sigstore" [
            rfc8785
            sigstore-models
            sigstore-rekor-types
            ps.cryptography
            ps.id
            ps.platformdirs
            ps.pydantic
            ps.pyjwt
            ps.requests
            ps.rfc3161-client
            ps.rich
            ps.tuf
          ];
        };

      # pyproject.toml [project].dependencies, in its order (tests/test_flake.py checks they
      # agree): `v` is the vendored set above, `ps` the nixpkgs Python package set.
      runtimeDependencies = ps: v: [
        v.mcp
        ps.starlette
        ps.uvicorn
        v.httpx2
        ps.jsonschema
        v.rfc8785
        ps.platformdirs
        v.sigstore
        ps.cryptography
        ps.packaging
        ps.httptools
        ps.rich
        v.tomli-w
        ps.websockets
      ];

      herdrMcpFor =
        pkgs:
        let
          python = pkgs.python3;
          ps = python.pkgs;
        in
        ps.buildPythonApplication {
          pname = "herdr-mcp";
          inherit version;
          pyproject = true;
          src = self;
          build-system = [ ps.hatchling ];
          # Release artifacts are built with the hatchling pinned in pyproject.toml (release/README.md);
          # here nixpkgs' own hatchling builds the package.
          postPatch = ''
            sed -i 's/"hatchling==[^"]*"/"hatchling"/' pyproject.toml
          '';
          dependencies = runtimeDependencies ps (vendoredFor pkgs ps);
          # nixpkgs chooses the versions of the unpinned dependencies; the == pins are vendored.
          pythonRelaxDeps = true;
          pythonImportsCheck = [
            "herdr_mcp"
            "herdr_mcp.cli"
          ];
          # The test suite needs git, ripgrep and loopback sockets: it runs in ci.yml
          # (./scripts/test); `nix flake check` runs the built command instead (checks below).
          doCheck = false;
          meta = {
            description = "A safe remote control plane between a Web AI and a Herdr workstation";
            license = pkgs.lib.licenses.mit;
            mainProgram = "herdr-mcp";
          };
        };
    in
    {
      packages = forAllSystems (pkgs: rec {
        herdr-mcp = herdrMcpFor pkgs;
        default = herdr-mcp;
      });

      apps = forAllSystems (pkgs: {
        default = {
          type = "app";
          program = "${self.packages.${pkgs.stdenv.hostPlatform.system}.herdr-mcp}/bin/herdr-mcp";
        };
      });

      checks = forAllSystems (
        pkgs:
        let
          herdr-mcp = self.packages.${pkgs.stdenv.hostPlatform.system}.herdr-mcp;
        in
        {
          inherit herdr-mcp;
          # The packaged runtime starts and reports the frozen contract it serves.
          version = pkgs.runCommand "herdr-mcp-version-check" { } ''
            ${herdr-mcp}/bin/herdr-mcp version --json | tee $out
            grep -q '"product": "herdr-mcp"' $out
            grep -q '"version": "${version}"' $out
          '';
        }
      );

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          # ./scripts/test and ./scripts/serve make their own .venv from this Python.
          packages = [
            pkgs.python3
            pkgs.git
            pkgs.ripgrep
            pkgs.nodejs
            pkgs.minisign
          ];
        };
      });
    };
}
