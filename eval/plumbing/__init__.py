"""What every package uses and no benchmark needs: files, retries, checked numbers, flags, the
error ladder, lazy faces, fingerprints, litellm set-up, progress and the secrets rules."""
