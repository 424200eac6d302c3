"""Quality measurement on a real model: assets (model + text, fetched once with the ordinary
package clients), a plain-torch Llama forward with a K/V hook, and the KV schemes compared."""
