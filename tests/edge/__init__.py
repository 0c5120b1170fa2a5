"""Tests of the Edge (edge/, a Cloudflare Worker) under workerd."""
