//! Following the Redis configuration store (contract section 12): every replica applies a change within 2 seconds.
//!
//! A task subscribes to the store's channel ([`super::redis_store::CHANNEL`]) on a connection of its own (a
//! subscription needs one) and wakes the refresher for each published version; the refresher also reads the version
//! every [`POLL`] in case a publication was missed (the subscription was down, Redis restarted). A refresh is
//! [`ConfigStore::reload`], which installs a new version and does nothing when the version is the one serving. The
//! reads are blocking (the store's synchronous client), so they run on the blocking pool.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::redis_store::CHANNEL;
use super::store::ConfigStore;

/// How often the version is read when nothing was published.
pub const POLL: Duration = Duration::from_secs(2);
/// The pause before the subscription is made again after it failed.
const RESUBSCRIBE: Duration = Duration::from_secs(1);

/// Reads the store once now (waiting for it), then follows it until `stop` is cancelled. Does nothing for a file
/// store.
pub async fn follow(store: Arc<ConfigStore>, stop: CancellationToken) {
    let Some(redis) = store.redis().cloned() else { return };
    refresh(&store).await;
    let wake = Arc::new(Notify::new());
    tokio::spawn(subscribe(redis.client().clone(), Arc::clone(&wake), stop.clone()));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = wake.notified() => {}
                _ = tokio::time::sleep(POLL) => {}
            }
            refresh(&store).await;
        }
    });
}

async fn refresh(store: &Arc<ConfigStore>) {
    let reading = Arc::clone(store);
    if let Err(e) = super::background::run("mcpgw-reload", move || reading.reload()).await {
        tracing::warn!(error = %e, "reading the configuration store failed");
    }
    if let Some(redis) = store.redis() {
        store.metrics().config_store_up.set(i64::from(redis.reachable()));
        store.metrics().config_version.set(i64::try_from(redis.version()).unwrap_or(i64::MAX));
    }
}

/// Wakes `wake` for each publication on the store's channel, subscribing again after a failure.
async fn subscribe(client: redis::Client, wake: Arc<Notify>, stop: CancellationToken) {
    loop {
        let subscribed = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(CHANNEL).await?;
            // Anything published while the subscription was down is caught by this read.
            wake.notify_one();
            let mut messages = pubsub.on_message();
            while messages.next().await.is_some() {
                wake.notify_one();
            }
            Ok::<(), redis::RedisError>(())
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            ended = subscribed => if let Err(e) = ended {
                tracing::debug!(error = %e, "the subscription to the configuration store's changes failed");
            },
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RESUBSCRIBE) => {}
        }
    }
}
