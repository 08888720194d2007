"""The web dashboard at /ui (issue 16): server-rendered pages, inline SVG charts, no CDN."""
